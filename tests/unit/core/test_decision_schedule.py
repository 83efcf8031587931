"""The decision's load-aware schedule, its per-platform limits, and the num_speculative_tokens
rule (pure, no engine); the rest of the decision table is in test_decision.py."""

from __future__ import annotations

from dataclasses import replace

import pytest
from decision_support import CPU, CUDA_033, RBLN, opted_in, run

from vllm_specdec_plugin.core.decide import decide
from vllm_specdec_plugin.core.methods import NGRAM_FALLBACK
from vllm_specdec_plugin.core.types import Annotation, CheckpointInfo, EngineRequest, KaitoRequest
from vllm_specdec_plugin.inputs.presets import builtin_preset_table

# --- the load-aware schedule -----------------------------------------------------------------
SCHED = replace(CPU, batch_schedule=True)
CUDA_V2 = replace(CUDA_033, batch_schedule=True,
                  v2_methods=frozenset({"ngram", "mtp", "eagle", "eagle3"}),
                  static_schedule={"mtp": "MTP ... (upstream vLLM issue #48494)"})
CUDA_V1 = replace(CUDA_033, batch_schedule=True, static_schedule={
    m: "V1 downgrades FULL_AND_PIECEWISE to PIECEWISE" for m in ("ngram", "mtp", "eagle")})


def test_plugin_choice_carries_a_load_aware_schedule():
    decision = run(caps=SCHED, max_num_seqs=64)
    assert decision.speculative_config["num_speculative_tokens_per_batch_size"] == [
        [1, 4, 5], [5, 8, 2], [9, 65536, 0]]
    assert decision.speculative_config["num_speculative_tokens"] == 5
    assert any("load-aware schedule" in n for n in decision.notes)
    mtp = run(caps=SCHED, checkpoint=CheckpointInfo("/m", mtp_layers=1)).speculative_config
    assert mtp["num_speculative_tokens_per_batch_size"] == [[1, 16, 1], [17, 65536, 0]]


@pytest.mark.parametrize("caps", [SCHED, CUDA_V2, CUDA_V1], ids=["cpu", "cuda-v2", "cuda-v1"])
def test_tuned_presets_get_exactly_kaitos_config_everywhere(caps):
    decision = run(caps=caps, model="Qwen/Qwen3.5-4B")
    assert decision.speculative_config == {"method": "mtp", "num_speculative_tokens": 1}
    assert any("exactly as KAITO validated" in n for n in decision.notes)


def test_cuda_keeps_the_schedule_only_where_vllm_keeps_it():
    # V2 runner: ngram keeps full graphs with the schedule
    v2 = run(caps=CUDA_V2)
    assert "num_speculative_tokens_per_batch_size" in v2.speculative_config
    assert any("each distinct k" in n for n in v2.notes)
    # V1 runner: the schedule would downgrade FULL_AND_PIECEWISE to PIECEWISE
    v1 = run(caps=CUDA_V1)
    assert v1.speculative_config == dict(NGRAM_FALLBACK)
    assert any("PIECEWISE" in n for n in v1.notes)
    # MTP from the checkpoint on CUDA: upstream #48494, static even on V2
    mtp = run(caps=CUDA_V2, checkpoint=CheckpointInfo("/m", mtp_layers=1))
    assert mtp.speculative_config == {"method": "mtp", "num_speculative_tokens": 1}
    assert any("48494" in n for n in mtp.notes)


def test_static_schedule_reasons_read_from_the_installed_vllm():
    from vllm_specdec_plugin.inputs.vllm_caps import static_schedule_reasons

    reasons = static_schedule_reasons(["ngram", "mtp", "suffix"], {"ngram", "mtp"}, graphs=True)
    assert set(reasons) == {"mtp", "suffix"} and "48494" in reasons["mtp"]
    assert "PIECEWISE" in reasons["suffix"]
    assert static_schedule_reasons(["ngram", "eagle"], (), graphs=False) == {}


def test_prefill_only_instance_gets_no_speculation():
    decision = run(kv_role="kv_producer")
    assert not decision.enabled and decision.source == "prefill-only"
    assert decision.errors == () and "prefill-only" in decision.notes[0]
    assert "prefill-only" in decision.summary()
    for role in ("kv_consumer", "kv_both", None):
        assert run(kv_role=role).method == "ngram"
    user = {"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_max": 2}
    kept = run(kv_role="kv_producer", speculative_config=user)
    assert kept.enabled and kept.speculative_config == user
    assert any("prefill-only" in n for n in kept.notes)


def test_pipeline_parallelism_warns_and_refuses_by_name():
    decision = run(pipeline_parallel_size=2)
    assert decision.enabled and any("#2303" in w for w in decision.warnings)
    refusing = replace(CPU, pipeline_refusals={"ngram": "no way"})
    decision = run(caps=refusing, pipeline_parallel_size=2)
    assert not decision.enabled
    assert "method 'ngram' cannot run with pipeline parallelism" in decision.errors[0]
    assert "no way" in decision.errors[0]
    # PP on the V1 runner: async off, even for mtp
    decision = run(caps=CUDA_V1, model="Qwen/Qwen3.5-4B", pipeline_parallel_size=2,
                   async_scheduling=True)
    assert decision.async_scheduling is False


def test_speculators_checkpoint_gets_the_same_checks():
    spec = CheckpointInfo("/m", speculators=True, speculators_method="eagle3",
                          speculators_tokens=40)
    decision = run(caps=RBLN, checkpoint=spec)
    assert decision.source == "speculators-checkpoint" and decision.method == "eagle3"
    assert decision.speculative_config == {"num_speculative_tokens": 32}  # RBLN's cap
    assert decision.async_scheduling is False
    decision = run(caps=CUDA_033, checkpoint=CheckpointInfo(
        "/m", speculators=True, speculators_method="medusa", speculators_tokens=3))
    assert "'medusa' is not supported" in decision.errors[0]
    decision = run(caps=CUDA_033, checkpoint=CheckpointInfo(
        "/m", speculators=True, speculators_method="eagle3", speculators_tokens=3))
    assert decision.enabled and decision.speculative_config is None


def test_schedule_off_cases():
    user = {"method": "ngram", "num_speculative_tokens": 5, "prompt_lookup_max": 4}
    assert run(caps=SCHED, speculative_config=user).speculative_config == user
    assert run(caps=SCHED, kaito=opted_in(schedule=False)).speculative_config == dict(
        NGRAM_FALLBACK)
    decision = run(caps=SCHED, data_parallel_size=2)
    assert decision.speculative_config == dict(NGRAM_FALLBACK)
    assert any("data parallelism" in n for n in decision.notes)
    decision = run(caps=CPU)  # a vLLM without the schedule
    assert decision.speculative_config == dict(NGRAM_FALLBACK)
    assert any("no num_speculative_tokens_per_batch_size" in n for n in decision.notes)


# --- num_speculative_tokens where vLLM has no default (issue 20) -----------------------------
@pytest.mark.parametrize(("config", "ok"), [
    ({"method": "ngram"}, False),
    ({"method": "ngram", "prompt_lookup_max": 4}, False),
    ({"method": "custom_class", "model": "pkg.Mod"}, False),
    ({"method": "mtp"}, False),
    ({"method": "mtp", "model": "/models/mtp-draft"}, True),
    ({"method": "suffix"}, True),
    ({"method": "ngram", "num_speculative_tokens": 3}, True),
])
def test_methods_vllm_refuses_without_num_speculative_tokens(config, ok):
    caps = replace(CPU, suffix_available=True, methods=CPU.methods | {"custom_class"})
    decision = run(caps=caps, speculative_config=config)
    errors = [e for e in decision.errors if "needs num_speculative_tokens" in e]
    assert bool(errors) is not ok, decision.errors
    if config == {"method": "ngram"}:
        assert errors[0].endswith('add it, e.g. {"method": "ngram", "num_speculative_tokens": 5, '
                                  '"prompt_lookup_max": 4}')


def test_the_tokens_rule_is_in_the_method_table():
    from vllm_specdec_plugin.core.methods import METHODS

    always = {name for name, spec in METHODS.items() if spec.tokens_required == "always"}
    assert always == {"ngram", "custom_class", "extract_hidden_states"}
    assert METHODS["suffix"].tokens_required == "never"


def test_adaptive_fallback_says_it_leaves_model_runner_v2():
    kaito = KaitoRequest(Annotation("true", "test"), fallback="adaptive")
    # vLLM 0.33.0 has custom_class (vllm/config/speculative.py); VLLM_033's list here predates it
    caps = replace(CUDA_V2, methods=CUDA_V2.methods | {"custom_class"})
    cuda = decide(kaito, EngineRequest(model="microsoft/Phi-4-mini-instruct"), caps,
                  builtin_preset_table())
    assert cuda.source == "adaptive-fallback"
    assert any("V1 model runner" in n and "Model Runner V2" in n for n in cuda.notes)
    cpu = decide(kaito, EngineRequest(model="microsoft/Phi-4-mini-instruct"), SCHED,
                 builtin_preset_table())
    assert not any("V1 model runner" in n for n in cpu.notes)  # no V2 runner there


def test_the_schedule_controller_runs_on_the_plugins_schedule_only():
    ours = run(caps=SCHED)
    assert ours.schedule_control is True
    assert any(n.startswith("schedule controller on: learns k per batch-size bucket")
               and "k in {0, 2, 5}" in n for n in ours.notes)
    assert "schedule controller on" in ours.summary()  # the engine's INFO line says it
    static = run(caps=SCHED, kaito=opted_in(schedule_control=False))
    assert static.schedule_control is False
    assert static.speculative_config == ours.speculative_config  # the fixed table, kept
    user = {"method": "ngram", "num_speculative_tokens": 5,
            "num_speculative_tokens_per_batch_size": [[1, 8, 5], [9, 64, 0]]}
    assert run(caps=SCHED, speculative_config=user).schedule_control is False
    assert run(caps=SCHED, data_parallel_size=2).schedule_control is False
    assert run(caps=CPU).schedule_control is False  # a vLLM without the schedule
    tuned = run(caps=SCHED, model="Qwen/Qwen3.5-4B")
    assert tuned.source == "tuned-preset" and tuned.schedule_control is False

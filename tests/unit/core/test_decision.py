"""The decision table and its validation rules (pure, no engine)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from conftest import release_caps

from vllm_specdec_plugin.core.decide import decide
from vllm_specdec_plugin.core.methods import NGRAM_FALLBACK, SOURCE_FALLBACK
from vllm_specdec_plugin.core.types import (
    SOURCE_TUNED,
    SOURCE_USER_ENGINE,
    SOURCE_USER_FILE,
    Annotation,
    EngineRequest,
    KaitoRequest,
)
from vllm_specdec_plugin.inputs.presets import builtin_preset_table

# vLLM 0.32-like and 0.33-like method sets, so the table is tested without importing vLLM.
VLLM_032 = ("0.32.0", {"ngram", "suffix", "eagle", "eagle3", "medusa", "mtp", "draft_model",
                       "ngram_gpu", "deepseek_mtp"},
            {"eagle", "eagle3", "mtp", "draft_model", "ngram_gpu", "deepseek_mtp"})
VLLM_033 = ("0.33.0", VLLM_032[1] - {"medusa", "mlp_speculator"}, VLLM_032[2])
CPU = release_caps("cpu", *VLLM_032)
CUDA_033 = release_caps("cuda", *VLLM_033)
RBLN = release_caps("rbln", *VLLM_032)
PRESETS = builtin_preset_table()


def opted_in(**kwargs) -> KaitoRequest:
    return KaitoRequest(Annotation("true", "test"), **kwargs)


def run(kaito=None, caps=CPU, **engine) -> object:
    engine.setdefault("model", "microsoft/Phi-4-mini-instruct")
    return decide(kaito or opted_in(), EngineRequest(**engine), caps, PRESETS)


@pytest.mark.parametrize("value", [None, "false"])
def test_not_opted_in_changes_nothing(value):
    decision = decide(KaitoRequest(Annotation(value, "t")), EngineRequest(model="m",
                      speculative_config={"method": "bogus"}, model_impl="optimum"), CPU, PRESETS)
    assert not decision.enabled and decision.errors == () and decision.warnings == ()
    assert decision.speculative_config is None and decision.model_impl is None


@pytest.mark.parametrize("value", ["", " true", "True", "TRUE", "yes", "1", "on", "true\n",
                                   "x" * 5000, "vérité"])
def test_bad_annotation_is_an_error_naming_it(value):
    decision = decide(KaitoRequest(Annotation(value, "env X")), EngineRequest(model="m"), CPU,
                      PRESETS)
    assert not decision.enabled
    (error,) = decision.errors
    assert "kaito.sh/enable-speculative-decoding" in error and '"true" or "false"' in error
    assert len(error) < 400  # a long value is shortened


def test_untuned_preset_gets_kaito_ngram_fallback():
    decision = run()
    assert decision.enabled and decision.source == SOURCE_FALLBACK
    assert decision.speculative_config == dict(NGRAM_FALLBACK)
    assert decision.speculative_config == {"method": "ngram", "num_speculative_tokens": 5,
                                           "prompt_lookup_max": 4}
    assert decision.model_impl == "auto"  # a draft-free method: vLLM resolves it


@pytest.mark.parametrize("name", ["Qwen/Qwen3.5-4B", "qwen/qwen3.5-4b", "deepseek-r1-0528",
                                  "deepseek-ai/DeepSeek-R1-0528", "/models/Qwen/Qwen3.6-27B/"])
def test_tuned_presets_get_mtp_k1(name):
    decision = run(model=name)
    assert decision.source == SOURCE_TUNED
    assert decision.speculative_config == {"method": "mtp", "num_speculative_tokens": 1}
    assert decision.async_scheduling is None  # mtp runs with async scheduling upstream


def test_all_fifteen_kaito_presets_are_tuned():
    assert len(PRESETS.presets) == 15


def test_preset_env_wins_over_model_and_served_name():
    decision = run(kaito=opted_in(preset="Qwen/Qwen3.5-9B"), model="local/dir",
                   served_model_names=("chat",))
    assert decision.source == SOURCE_TUNED and decision.preset == "Qwen/Qwen3.5-9B"


def test_served_model_name_is_matched():
    decision = run(model="/mnt/models/x", served_model_names=("XiaomiMiMo/MiMo-7B-Base",))
    assert decision.source == SOURCE_TUNED


def test_no_preset_no_model_is_an_error():
    decision = run(model=None)
    assert not decision.enabled and "preset" in decision.errors[0]


def test_user_engine_config_is_untouched():
    user = {"method": "ngram", "num_speculative_tokens": 8, "prompt_lookup_max": 6}
    decision = run(speculative_config=user, model="Qwen/Qwen3.5-4B")
    assert decision.source == SOURCE_USER_ENGINE and decision.speculative_config == user


def test_user_file_config_is_used_unchanged():
    user = {"method": "suffix"}
    caps = release_caps("cpu", *VLLM_032)
    if not caps.suffix_available:
        pytest.skip("arctic_inference not installed")
    decision = run(kaito=opted_in(config_speculative_config=user), caps=caps)
    assert decision.source == SOURCE_USER_FILE and decision.speculative_config == user


def test_engine_config_wins_over_file_with_a_warning():
    decision = run(kaito=opted_in(config_speculative_config={"method": "ngram",
                                                             "num_speculative_tokens": 2},
                                  config_path="/cfg.yaml"),
                   speculative_config={"method": "ngram", "num_speculative_tokens": 3})
    assert decision.speculative_config["num_speculative_tokens"] == 3
    assert any("/cfg.yaml" in w for w in decision.warnings)


@pytest.mark.parametrize("runtime", ["transformers", "VLLM", ""])
def test_non_vllm_runtime_is_refused(runtime):
    decision = run(kaito=opted_in(runtime=Annotation(runtime, "env KAITO_RUNTIME")))
    assert not decision.enabled and "kaito.sh/runtime" in decision.errors[0]


def test_vllm_runtime_is_accepted():
    assert run(kaito=opted_in(runtime=Annotation("vllm", "f"))).enabled


@pytest.mark.parametrize("method", ["eagle", "eagle3", "medusa"])
def test_draft_methods_need_a_model(method):
    decision = run(speculative_config={"method": method, "num_speculative_tokens": 3})
    assert not decision.enabled and '"model"' in decision.errors[0]


def test_medusa_refused_by_name_on_vllm_033():
    decision = run(caps=CUDA_033, speculative_config={"method": "medusa", "model": "d"})
    assert "'medusa' is not supported on vLLM 0.33.0 on cuda" in decision.errors[0]


def test_suffix_needs_arctic_inference():
    caps = release_caps("cpu", *VLLM_032, suffix_available=False)
    decision = run(caps=caps, speculative_config={"method": "suffix"})
    assert "arctic-inference" in decision.errors[0]


def test_rbln_refuses_methods_outside_its_list():
    decision = run(caps=RBLN, speculative_config={"method": "draft_model", "model": "d"})
    assert "'draft_model' is not supported on vLLM 0.32.0 on rbln" in decision.errors[0]


def test_rbln_caps_num_speculative_tokens_with_a_warning():
    decision = run(caps=RBLN, speculative_config={"method": "ngram", "num_speculative_tokens": 40,
                                                  "prompt_lookup_max": 4})
    assert decision.speculative_config["num_speculative_tokens"] == 32
    assert any("40 -> 32" in w for w in decision.warnings)


def test_rbln_turns_async_off_even_for_mtp():
    decision = run(caps=RBLN, model="Qwen/Qwen3.5-4B", async_scheduling=True)
    assert decision.async_scheduling is False
    assert any("--async-scheduling turned off" in w for w in decision.warnings)


def test_explicit_async_with_ngram_is_turned_off():
    decision = run(async_scheduling=True)
    assert decision.async_scheduling is False
    assert any("--async-scheduling turned off" in w and "ngram" in w for w in decision.warnings)


def test_explicit_no_async_is_kept():
    decision = run(async_scheduling=False)
    assert decision.async_scheduling is False and decision.warnings == ()


def test_async_with_eagle_is_left_alone():
    decision = run(speculative_config={"method": "eagle", "model": "d"}, async_scheduling=True)
    assert decision.async_scheduling is True


def test_bad_num_speculative_tokens():
    decision = run(speculative_config={"method": "ngram", "num_speculative_tokens": "5"})
    assert "positive integer" in decision.errors[0]


def test_config_without_method_or_model():
    decision = run(speculative_config={"num_speculative_tokens": 2})
    assert "neither `method` nor `model`" in decision.errors[0]


# --- the automatic choice (issue: every method, best one a checkpoint allows) ----------------
from vllm_specdec_plugin.core.types import CheckpointInfo  # noqa: E402


def test_auto_order_speculators_then_preset_then_mtp_then_draft_then_fallback():
    spec = CheckpointInfo("/m", speculators=True, mtp_layers=1)
    mtp = CheckpointInfo("/m", mtp_layers=1)
    draft = CheckpointInfo("/d", draft_method="eagle3")
    assert run(checkpoint=spec).source == "speculators-checkpoint"
    assert run(checkpoint=spec).speculative_config is None
    assert run(model="Qwen/Qwen3.5-4B", checkpoint=mtp).source == SOURCE_TUNED
    assert run(checkpoint=mtp).speculative_config == {"method": "mtp",
                                                      "num_speculative_tokens": 1}
    decision = run(kaito=opted_in(draft=draft), checkpoint=mtp)
    assert decision.source == "checkpoint-mtp"
    decision = run(kaito=opted_in(draft=draft))
    assert decision.source == "draft-model"
    assert decision.speculative_config == {"method": "eagle3", "model": "/d",
                                           "num_speculative_tokens": 3}
    assert run(kaito=opted_in(fallback="suffix")).speculative_config == {"method": "suffix"}
    assert "VLLM_SPECDEC_FALLBACK" in run(kaito=opted_in(fallback="lookahead")).errors[0]


def test_draft_checks(tmp_path):
    import json

    from vllm_specdec_plugin.core.errors import SpecDecodeConfigError
    from vllm_specdec_plugin.inputs.checkpoint import inspect_draft

    with pytest.raises(SpecDecodeConfigError, match="not a checkpoint directory"):
        inspect_draft(str(tmp_path / "missing"), None)
    (tmp_path / "config.json").write_text(json.dumps(
        {"architectures": ["EagleLlamaForCausalLM"], "vocab_size": 10, "hidden_size": 8}))
    target = CheckpointInfo("/t", vocab_size=12, hidden_size=8)
    with pytest.raises(SpecDecodeConfigError, match="vocab_size 10 but the target has 12"):
        inspect_draft(str(tmp_path), target)
    target = CheckpointInfo("/t", vocab_size=10, hidden_size=16)
    with pytest.raises(SpecDecodeConfigError, match="hidden size 8 but the target has 16"):
        inspect_draft(str(tmp_path), target)
    assert inspect_draft(str(tmp_path), CheckpointInfo("/t", vocab_size=10)).draft_method == (
        "eagle")


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


# --- the preset is the model's, not the served name's (issue 20) -----------------------------
LLAMA = "meta-llama/Llama-3.1-8B-Instruct"
MTP_K1 = {"method": "mtp", "num_speculative_tokens": 1}


def test_served_name_of_a_tuned_preset_does_not_override_a_hub_model():
    """An InferenceSet named deepseek-r1-0528 serving Llama: the model decides, with a warning."""
    decision = run(model=LLAMA, served_model_names=("deepseek-r1-0528",))
    assert decision.enabled and decision.source == SOURCE_FALLBACK
    assert decision.speculative_config["method"] == "ngram"
    (warning,) = [w for w in decision.warnings if "served-model-name" in w]
    assert "'deepseek-r1-0528'" in warning and LLAMA in warning and "the model decides" in warning


def test_hub_model_of_another_tuned_preset_wins_over_the_served_name():
    decision = run(model="Qwen/Qwen3.5-4B", served_model_names=("deepseek-r1-0528",))
    assert decision.source == SOURCE_TUNED and decision.preset == "Qwen/Qwen3.5-4B"
    assert any("its preset 'Qwen/Qwen3.5-4B'" in w for w in decision.warnings)


def test_served_name_agreeing_with_the_model_gives_no_warning():
    decision = run(model="deepseek-ai/DeepSeek-R1-0528", served_model_names=("deepseek-r1-0528",))
    assert decision.source == SOURCE_TUNED
    assert not [w for w in decision.warnings if "served-model-name" in w]


def test_kaito_preset_name_decides_before_model_and_served_name():
    decision = run(kaito=opted_in(preset="deepseek-r1-0528"), model=LLAMA,
                   served_model_names=("Qwen/Qwen3.5-4B",))
    assert decision.source == SOURCE_TUNED and decision.preset == "deepseek-r1-0528"


def test_tuned_mtp_preset_on_a_local_checkpoint_without_mtp_layers_falls_back():
    no_mtp = CheckpointInfo("/models/Qwen/Qwen3.5-4B", mtp_layers=0)
    decision = run(model="/models/Qwen/Qwen3.5-4B", checkpoint=no_mtp)
    assert decision.enabled and decision.source == SOURCE_FALLBACK
    (warning,) = [w for w in decision.warnings if "MTP layers" in w]
    assert "tuned preset 'Qwen/Qwen3.5-4B'" in warning and "declares none" in warning
    with_mtp = replace(no_mtp, mtp_layers=1)
    decision = run(model="/models/Qwen/Qwen3.5-4B", checkpoint=with_mtp)
    assert decision.source == SOURCE_TUNED and decision.speculative_config == MTP_K1
    # a served name on a local checkpoint still picks the preset; the layers are checked
    decision = run(model="/mnt/models/x", served_model_names=("deepseek-r1-0528",),
                   checkpoint=CheckpointInfo("/mnt/models/x"))
    assert decision.source == SOURCE_FALLBACK and any("MTP layers" in w for w in decision.warnings)


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

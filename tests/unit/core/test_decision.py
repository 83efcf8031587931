"""The decision table and its validation rules (pure, no engine); the load-aware schedule and the
num_speculative_tokens rule are in test_decision_schedule.py."""

from __future__ import annotations

from dataclasses import replace

import pytest
from conftest import release_caps
from decision_support import CPU, CUDA_033, PRESETS, RBLN, VLLM_032, opted_in, run

from vllm_specdec_plugin.core.decide import decide
from vllm_specdec_plugin.core.methods import NGRAM_FALLBACK, SOURCE_FALLBACK
from vllm_specdec_plugin.core.types import (
    SOURCE_TUNED,
    SOURCE_USER_ENGINE,
    SOURCE_USER_FILE,
    Annotation,
    CheckpointInfo,
    EngineRequest,
    KaitoRequest,
)


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



"""Which `model_impl` an opted-in engine runs with (pure decision, no engine).

vLLM falls back to its Transformers backend only on `auto` (vLLM 0.32
model_executor/models/registry.py), so the plugin keeps the user's value unless the platform
(RBLN) or the method (MTP: `MethodSpec.needs_native_target`) needs vLLM's own implementation.
"""

from __future__ import annotations

from dataclasses import replace

from conftest import release_caps

from vllm_specdec_plugin.core.decide import decide
from vllm_specdec_plugin.core.types import Annotation, CheckpointInfo, EngineRequest, KaitoRequest
from vllm_specdec_plugin.inputs.presets import builtin_preset_table

VLLM_032 = ("0.32.0", {"ngram", "suffix", "eagle", "eagle3", "medusa", "mtp", "draft_model"},
            {"eagle", "eagle3", "mtp", "draft_model"})
CPU = release_caps("cpu", *VLLM_032)
RBLN = release_caps("rbln", *VLLM_032)
# The target's architecture as vLLM's registry tells it (inputs.vllm_caps).
NATIVE = replace(CPU, vllm_serves_target=True)
TRANSFORMERS_ONLY = replace(CPU, vllm_serves_target=False)
HELIUM = CheckpointInfo("/models/helium", architectures=("HeliumForCausalLM",))
MTP = {"method": "mtp", "num_speculative_tokens": 1}
PRESETS = builtin_preset_table()


def run(caps=CPU, **engine):
    engine.setdefault("model", "/models/helium")
    return decide(KaitoRequest(Annotation("true", "test")), EngineRequest(**engine), caps,
                  PRESETS)


def impl_warnings(decision) -> list[str]:
    return [w for w in decision.warnings if w.startswith("model_impl ")]


def test_rbln_always_forces_vllm_and_says_so():
    decision = run(caps=RBLN)
    assert decision.enabled and decision.method == "ngram" and decision.model_impl == "vllm"
    (warning,) = impl_warnings(decision)
    assert warning.startswith("model_impl 'auto' -> 'vllm'") and "optimum" in warning
    decision = run(caps=RBLN, model_impl="optimum")
    assert decision.model_impl == "vllm"
    assert impl_warnings(decision)[0].startswith("model_impl 'optimum' -> 'vllm'")
    assert impl_warnings(run(caps=RBLN, model_impl="vllm")) == []


def test_mtp_forces_vllm_only_where_auto_might_not_resolve_to_it():
    # Not known (no local config.json): "vllm", said in a warning.
    decision = run(caps=CPU, speculative_config=MTP)
    assert decision.enabled and decision.model_impl == "vllm"
    (warning,) = impl_warnings(decision)
    assert warning.startswith("model_impl 'auto' -> 'vllm': method 'mtp'")
    # The registry lists the architecture: vLLM's "auto" is its own implementation already.
    decision = run(caps=NATIVE, speculative_config=MTP)
    assert decision.enabled and decision.model_impl == "auto"
    assert impl_warnings(decision) == []
    assert impl_warnings(run(caps=NATIVE, speculative_config=MTP, model_impl="vllm")) == []


def test_draft_free_method_on_a_transformers_only_target_leaves_auto():
    decision = run(caps=TRANSFORMERS_ONLY, checkpoint=HELIUM)
    assert decision.enabled and decision.method == "ngram"
    assert decision.model_impl == "auto" and impl_warnings(decision) == []


def test_eagle_leaves_model_impl_to_vllm():
    """vLLM's Transformers backend runs EAGLE (tests/engine/test_model_impl.py)."""
    config = {"method": "eagle", "model": "/d", "num_speculative_tokens": 3}
    for caps in (TRANSFORMERS_ONLY, NATIVE):
        decision = run(caps=caps, checkpoint=HELIUM, speculative_config=config)
        assert decision.enabled and decision.model_impl == "auto"
        assert impl_warnings(decision) == []


def test_mtp_on_a_transformers_only_target_is_refused():
    decision = run(caps=TRANSFORMERS_ONLY, checkpoint=HELIUM, speculative_config=MTP)
    assert not decision.enabled and decision.model_impl is None
    (error,) = decision.errors
    assert "'mtp'" in error and "HeliumForCausalLM" in error and "Transformers backend" in error
    assert "use a draft-free method (ngram, suffix)" in error and "\n" not in error


def test_automatic_mtp_choice_on_a_transformers_only_target_falls_back():
    """The plugin's own choice never picks what the target cannot run: the checkpoint's MTP
    layers and a tuned MTP preset give way to the draft-free fallback, with a warning."""
    with_layers = replace(HELIUM, mtp_layers=1)
    for model, choices in (("/models/helium", 1), ("Qwen/Qwen3.5-4B", 2)):  # 2: tuned first
        decision = run(caps=TRANSFORMERS_ONLY, model=model, checkpoint=with_layers)
        assert decision.enabled and decision.method == "ngram" and decision.model_impl == "auto"
        assert len([w for w in decision.warnings
                    if "HeliumForCausalLM" in w and "next choice" in w]) == choices
    assert run(caps=NATIVE, checkpoint=replace(with_layers, architectures=(
        "MiMoForCausalLM",))).method == "mtp"


def test_users_transformers_is_kept_for_a_draft_free_method():
    decision = run(caps=NATIVE, model_impl="transformers")
    assert decision.enabled and decision.model_impl == "transformers"
    assert impl_warnings(decision) == []


def test_users_transformers_with_mtp_is_refused():
    decision = run(caps=NATIVE, model_impl="transformers", speculative_config=MTP)
    assert not decision.enabled
    (error,) = decision.errors
    assert error.startswith("model_impl 'transformers' (--model-impl) cannot run")
    assert "--model-impl vllm" in error and "ngram" in error

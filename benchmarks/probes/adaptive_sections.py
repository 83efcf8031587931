"""Where the adaptive proposer's own time goes inside a real engine, part by part.

    python -m benchmarks adaptive_sections WORKLOAD CONCURRENCY [--bursts 4] [--max-tokens 24]

Starts one real `LLM()` (SmolLM2-135M float32, the paired benchmark's engine settings) with
the engine core and the worker in this process (`lib/engine_setup.start_llm`), so the
proposer's methods can be wrapped with timers (`lib/timers.py`) before the engine builds it.
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
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.lib.engine_setup import start_llm, use_in_process_engine
from benchmarks.lib.timers import Timers
from benchmarks.lib.workloads import load_workload


class SectionTimers(Timers):
    """`Timers`, plus the proposer calls and batch rows the parts' times are shared over."""

    def __init__(self) -> None:
        super().__init__()
        self.cycles = 0
        self.rows = 0

    def reset(self) -> None:
        super().reset()
        self.cycles = self.rows = 0

    def report(self) -> list[str]:
        """One line per part, the most expensive first: calls, µs per row, µs per call."""
        rows = max(self.rows, 1)
        return [f"{label:16s} calls={self.calls[label]:6d} µs/row={1e6 * seconds / rows:8.2f} "
                f"µs/call={1e6 * seconds / self.calls[label]:8.1f}"
                for label, seconds in sorted(self.seconds.items(), key=lambda item: -item[1])]


def install(timers: SectionTimers) -> None:
    """Wrap the proposer's parts (before the engine builds the proposer)."""
    from vllm_specdec_plugin.proposer import candidates, proposer, rows
    from vllm_specdec_plugin.proposer.acceptance import PooledAcceptance
    from vllm_specdec_plugin.proposer.learning import AcceptanceLearner
    from vllm_specdec_plugin.proposer.timing import CycleTimer

    cls = proposer.AdaptiveProposer
    for owner, name, label in (
            (cls, "_match_rows", "match_rows"), (AcceptanceLearner, "score", "score"),
            (cls, "_stop", "stop"), (CycleTimer, "observe", "time_cycle"),
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
        timers.cycles += 1
        timers.rows += len(sampled)
        return drafts

    cls._cycle = timed_cycle  # type: ignore[method-assign,assignment]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("workload", help="a file in benchmarks/workloads/ (without .json)")
    parser.add_argument("concurrency", type=int)
    parser.add_argument("--bursts", type=int, default=4)
    parser.add_argument("--max-tokens", type=int, default=24)
    parser.add_argument("--model", help="a checkpoint directory (default: SmolLM2-135M, "
                        "built by benchmarks/smollm2.py on first use)")
    args = parser.parse_args(argv)
    stats = Path(tempfile.mkdtemp()) / "stats.json"
    use_in_process_engine({
        "KAITO_ENABLE_SPECULATIVE_DECODING": "true", "VLLM_SPECDEC_FALLBACK": "adaptive",
        # the harness repeats the same prompts: a cross-request cache would learn the answers
        "VLLM_SPECDEC_ADAPTIVE_SUFFIX_CACHE": "0", "VLLM_SPECDEC_ADAPTIVE_STATS": str(stats)})
    timers = SectionTimers()
    install(timers)
    from vllm import SamplingParams

    llm = start_llm(args.model, args.concurrency, dtype="float32")
    params = SamplingParams(temperature=0, max_tokens=args.max_tokens, ignore_eos=True)
    workload = load_workload(args.workload)
    messages = [prompt["messages"] for prompt in workload["prompts"][:args.concurrency]]
    llm.chat(messages, params, use_tqdm=False)  # warm-up: compiles, first cost samples
    timers.reset()
    start = time.perf_counter()
    for _ in range(args.bursts):
        llm.chat(messages, params, use_tqdm=False)
    seconds = time.perf_counter() - start
    tokens = args.bursts * len(messages) * args.max_tokens
    print(f"{args.workload} c={args.concurrency}: {tokens / seconds:.1f} tok/s, "
          f"{timers.cycles} calls, {timers.rows} rows")
    print("\n".join(timers.report()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

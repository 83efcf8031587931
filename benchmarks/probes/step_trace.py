"""Where whole runs of fixed k spend their time, step by step: every engine step of each arm
sorted into steps with a prefill chunk, the step right after one, and decode-only steps (the
only ones the schedule controller measures), with the tokens each emitted.

    python -m benchmarks step_trace [--workload sharegpt] [--requests 64] [--groups 4]
        [--max-num-seqs 16] [--tokens 40] [--lengths fixed] [--arms k0,k5] [--out FILE]

Each group of `--requests` prompts runs as a queue through `--max-num-seqs` slots (a freed slot
refilled at once), once per arm in an order drawn per group, after a one-token run of the same
prompts that fills vLLM's prefix cache (not counted). An arm holds every batch size at its k
from the run's first step (`ControlledScheduler.restart`). A step's time is the engine cycle the
controller times (`ControlledScheduler.observe`, the previous update's end to this one's); its
tokens are those vLLM emitted (the sampled lists after `update_from_output` cut them at each
request's end). Each arm serves two requests first, not counted (at k>0 the n-gram
matcher's JIT compiles in its first step). The steady window is the steps while requests were
waiting for a slot (the batch full; what serving under load sees, without the group's drain at
its end).

Written to find why the controller's per-step pairs rated k=5 above k=0 on ShareGPT where whole
runs put it below (docs/schedule-controller.md, "In steady state on ShareGPT"). It times the
engine: run it alone on the host.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.lib.engine_setup import start_llm
from benchmarks.lib.results import RESULTS_DIR, command, vllm_version, write_json
from benchmarks.lib.workloads import LENGTHS, output_lengths, workload_token_ids
from vllm_specdec_plugin.engine.schedule_runtime import walk

SEED = 20261206
KINDS = ("prefill", "after_prefill", "decode")


class Trace:
    """The engine's steps, each (arm, batch, k, seconds, emitted, drafted, prefill tokens,
    waiting), recorded by wrapping the controller runtime's `observe`."""

    def __init__(self, runtime: Any) -> None:
        self.steps: list[tuple[str, int, int, float, int, int, int, int]] = []
        self.arm: str | None = None
        self.previous_end = 0.0
        observe = runtime.observe
        waiting = runtime.scheduler_state

        def traced(output: Any, runner_output: Any, result: Any, end: float,
                   finished: Any = ()) -> None:
            batch = len(output.num_scheduled_tokens)
            if batch and self.arm is not None:
                # the controller's own count without vLLM's stats: after the update, so the
                # sampled lists are cut at each request's end
                rows, drafted, _ = walk(output, runner_output, batch)
                emitted = sum(map(len, rows)) if isinstance(rows, list) else rows
                prefill = output.total_num_scheduled_tokens - batch - drafted
                self.steps.append((self.arm, batch, output.num_spec_tokens_to_schedule,
                                   end - self.previous_end, emitted, drafted, prefill,
                                   len(waiting["waiting"])))
            self.previous_end = end
            observe(output, runner_output, result, end, finished)

        runtime.observe = traced


def summary(steps: list[tuple[str, int, int, float, int, int, int, int]], arm: str
            ) -> dict[str, Any]:
    """One arm's steps by kind, by batch size (decode-only), and in the steady window."""
    mine = [s for s in steps if s[0] == arm]
    kinds: dict[str, list[float]] = {kind: [0, 0.0, 0] for kind in KINDS}
    by_batch: dict[int, list[float]] = {}
    after = True
    for _, batch, _, seconds, emitted, _, prefill, _ in mine:
        kind = "prefill" if prefill > 0 else "after_prefill" if after else "decode"
        after = prefill > 0
        cell = kinds[kind]
        cell[0] += 1
        cell[1] += seconds
        cell[2] += emitted
        if kind == "decode":
            row = by_batch.setdefault(batch, [0, 0.0, 0])
            row[0] += 1
            row[1] += seconds
            row[2] += emitted
    steady = [s for s in mine if s[7] > 0]

    def figures(n: float, seconds: float, tokens: float) -> dict[str, Any]:
        return {"steps": int(n), "seconds": round(seconds, 4), "tokens": int(tokens),
                "ms_per_step": round(1000 * seconds / n, 3) if n else None,
                "tokens_per_s": round(tokens / seconds, 2) if seconds else None}

    return {"seconds": round(sum(s[3] for s in mine), 4),
            "tokens": sum(s[4] for s in mine),
            "kinds": {kind: figures(*cell) for kind, cell in kinds.items()},
            "decode_by_batch": {str(b): figures(*row) for b, row in sorted(by_batch.items())},
            "steady": {**figures(len(steady), sum(s[3] for s in steady),
                                 sum(s[4] for s in steady)),
                       "with_prefill": sum(1 for s in steady if s[6] > 0)}}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workload", default="sharegpt")
    parser.add_argument("--requests", type=int, default=64, help="requests per group")
    parser.add_argument("--groups", type=int, default=4)
    parser.add_argument("--max-num-seqs", type=int, default=16)
    parser.add_argument("--tokens", type=int, default=40)
    parser.add_argument("--lengths", choices=LENGTHS, default="fixed")
    parser.add_argument("--arms", type=lambda s: s.split(","), default=["k0", "k5"])
    parser.add_argument("--out", default=str(RESULTS_DIR / "step-trace.json"))
    args = parser.parse_args(argv)
    from vllm import SamplingParams

    from benchmarks.probes.run_pairs import hold
    from benchmarks.probes.schedule_switchback import runtime_of

    llm = start_llm(None, args.max_num_seqs, env={"KAITO_ENABLE_SPECULATIVE_DECODING": "true"},
                    disable_log_stats=False)
    runtime = runtime_of(llm)
    trace = Trace(runtime)
    count = args.groups * args.requests
    prompts = [{"prompt_token_ids": ids}
               for ids in workload_token_ids(llm.get_tokenizer(), args.workload, count)]
    params = [SamplingParams(max_tokens=n, temperature=0.0, ignore_eos=True)
              for n in output_lengths(args.lengths, args.tokens, count)]
    first = SamplingParams(max_tokens=1, temperature=0.0, ignore_eos=True)
    for arm in args.arms:  # each arm's first steps compile what it runs (the n-gram
        hold(runtime, arm)  # matcher's JIT at k>0: over a second), not counted
        llm.generate(prompts[:2], SamplingParams(max_tokens=16, ignore_eos=True), use_tqdm=False)
    rng = random.Random(SEED)
    walls: dict[str, float] = dict.fromkeys(args.arms, 0.0)
    for group in range(args.groups):
        at = slice(group * args.requests, (group + 1) * args.requests)
        trace.arm = None
        llm.generate(prompts[at], first, use_tqdm=False)  # the prefix cache, not counted
        for arm in rng.sample(args.arms, len(args.arms)):
            hold(runtime, arm)
            trace.arm = arm
            start = trace.previous_end = time.perf_counter()
            llm.generate(prompts[at], params[at], use_tqdm=False)
            walls[arm] += time.perf_counter() - start
    trace.arm = None
    arms = {arm: {"wall_s": round(walls[arm], 4), **summary(trace.steps, arm)}
            for arm in args.arms}
    out = {"meta": {"kind": "step-trace",
                    "command": command("step_trace", list(argv or sys.argv[1:])),
                    "vllm": vllm_version(), "workload": args.workload,
                    "requests": args.requests, "groups": args.groups,
                    "max_num_seqs": args.max_num_seqs, "tokens": args.tokens,
                    "lengths": args.lengths, "seed": SEED},
           "arms": arms}
    write_json(Path(args.out), out, indent=1)
    for arm, found in arms.items():
        print(arm, {kind: (v["steps"], v["seconds"], v["tokens"])
                    for kind, v in found["kinds"].items()}, "steady", found["steady"])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

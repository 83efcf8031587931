"""A run of k against a run of k=0 in one engine, paired request by request (what whatif predicts).

    python -m benchmarks run_pairs [--workloads a,b] [--concurrency 1,4] [--requests 56]
        [--tokens 96] [--arms k0,k5] [--model PATH] [--out FILE]

The switchback (`core/switchback.py`) alternates arms in blocks of steps inside one stream of
requests, which is fine for the controller's question (is k better than k=0 here and now) but
not a run: on copying text it overstates a k run's speedup (docs/whatif.md). Here each batch of
`concurrency` requests of the workload (the same prompts `whatif_serve` served, greedy,
ignore_eos, `--tokens` tokens) is served whole under each arm, in an order drawn at random per
pair, in one in-process engine opted in (the schedule controller's runtime holds every bucket at
the arm's k: `restart("kN,kN")`). A pair's time is its decode time: each batch is also served
for one token (its prefill and first token) and that is taken off both arms, since `whatif`
predicts the decode steps. The cell's figure: the sum of the first arm's decode seconds over
the second's (the same tokens in both: a run's speedup), with a 90% bootstrap interval over the
pairs, and the median of the per-pair ratios. `--arms k0,k0` is the A/A. It times the engine:
run it alone on the host.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.lib.engine_setup import start_llm
from benchmarks.lib.results import RESULTS_DIR, command, vllm_version, write_json
from benchmarks.lib.workloads import WORKLOADS, workload_token_ids

SEED = 20261202
RESAMPLES = 2000


def timed(llm: Any, batch: list[Any], params: Any) -> float:
    start = time.perf_counter()
    llm.generate(batch, params, use_tqdm=False)
    return time.perf_counter() - start


def interval(pairs: list[tuple[float, float]], rng: random.Random) -> tuple[float, float]:
    """90% bootstrap interval of sum(a) / sum(b) over the pairs."""
    ratios = []
    for _ in range(RESAMPLES):
        drawn = [pairs[rng.randrange(len(pairs))] for _ in pairs]
        ratios.append(sum(a for a, _ in drawn) / sum(b for _, b in drawn))
    ratios.sort()
    return ratios[int(0.05 * RESAMPLES)], ratios[int(0.95 * RESAMPLES) - 1]


def run_cell(llm: Any, tokenizer: Any, workload: str, concurrency: int, arms: list[str],
             requests: int, tokens: int, rng: random.Random) -> dict[str, Any]:
    from vllm import SamplingParams

    from benchmarks.probes.schedule_switchback import runtime_of

    runtime = runtime_of(llm)
    prompts = [{"prompt_token_ids": ids} for ids in workload_token_ids(tokenizer, workload,
                                                                       requests)]
    decode = SamplingParams(max_tokens=tokens, temperature=0.0, ignore_eos=True)
    first = SamplingParams(max_tokens=1, temperature=0.0, ignore_eos=True)
    pairs: list[tuple[float, float]] = []
    for start in range(0, len(prompts) - concurrency + 1, concurrency):
        batch = prompts[start:start + concurrency]
        seconds = {}
        for arm in rng.sample(arms, 2) if arms[0] != arms[1] else arms:
            runtime.restart(f"{arm},{arm}", fresh=False)
            seconds.setdefault(arm, []).append(timed(llm, batch, decode))
        runtime.restart(f"{arms[0]},{arms[0]}", fresh=False)
        prefill = timed(llm, batch, first)
        a, b = seconds[arms[0]][0], seconds[arms[1]][-1]
        pairs.append((a - prefill, b - prefill))
    low, high = interval(pairs, rng)
    ratios = sorted(a / b for a, b in pairs)
    return {"workload": workload, "concurrency": concurrency, "arms": arms,
            "pairs": len(pairs), "ratio": sum(a for a, _ in pairs) / sum(b for _, b in pairs),
            "low": low, "high": high, "median_pair_ratio": ratios[len(ratios) // 2],
            "seconds": [sum(a for a, _ in pairs), sum(b for _, b in pairs)]}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workloads", type=lambda s: s.split(","), default=list(WORKLOADS))
    parser.add_argument("--concurrency", type=lambda s: [int(c) for c in s.split(",")],
                        default=[1, 4])
    parser.add_argument("--requests", type=int, default=56)
    parser.add_argument("--tokens", type=int, default=96)
    parser.add_argument("--arms", type=lambda s: s.split(","), default=["k0", "k5"])
    parser.add_argument("--aa", default="open_ended:1",
                        help="workload:concurrency of the A/A cell (first arm against itself)")
    parser.add_argument("--model", help="a checkpoint directory (default: SmolLM2-135M)")
    parser.add_argument("--out", default=str(RESULTS_DIR / "whatif" / "runs.json"))
    args = parser.parse_args(argv)
    rng = random.Random(SEED)
    llm = start_llm(args.model, 32, env={"KAITO_ENABLE_SPECULATIVE_DECODING": "true"})
    tokenizer = llm.get_tokenizer()
    timed(llm, [{"prompt_token_ids": [1, 2, 3]}], __import__("vllm").SamplingParams(
        max_tokens=8))  # warm-up
    cells = []
    plan = [(w, c, args.arms) for w in args.workloads for c in args.concurrency]
    if args.aa:
        workload, concurrency = args.aa.split(":")
        plan.append((workload, int(concurrency), [args.arms[0], args.arms[0]]))
    for workload, concurrency, arms in plan:
        cell = run_cell(llm, tokenizer, workload, concurrency, arms, args.requests,
                        args.tokens, rng)
        cells.append(cell)
        print("CELL", json.dumps(cell), flush=True)
    out = {"meta": {"kind": "run-pairs", "command": command("run_pairs",
                                                            list(argv or sys.argv[1:])),
                    "vllm": vllm_version(), "requests": args.requests, "tokens": args.tokens,
                    "seed": SEED}, "cells": cells}
    write_json(Path(args.out), out, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

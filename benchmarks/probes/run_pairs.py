"""Whole runs of each arm in one engine, grouped request batch by request batch (what whatif
predicts, and the controller against fixed k).

    python -m benchmarks run_pairs [--workloads a,b] [--concurrency 1,4] [--requests 56]
        [--groups N] [--tokens 96] [--lengths fixed] [--arms k0,k5] [--warmup 15]
        [--max-num-seqs 32]
        [--model PATH] [--out FILE]

The switchback (`core/switchback.py`) alternates arms in blocks of steps inside one stream of
requests, which is fine for the controller's question (is k better than k=0 here and now) but
not a run: on copying text it overstates a k run's speedup (docs/whatif.md). Here each batch of
`concurrency` requests of the workload (the same prompts `whatif_serve` served, greedy,
ignore_eos, `--tokens` tokens, or with `--lengths uniform` each request's own length drawn
around it) is served whole under each arm, in an order drawn at random per group, in one
in-process engine opted in (`--groups N`: N batches per cell, `N * concurrency`
requests, in place of `--requests`). An arm `k<N>` holds every bucket at N (the schedule
controller's runtime: `restart("kN,kN")`, which does not feed the controller and writes the
lookup before the run's first step); the arm
`controller` is the controller alone, as it serves (`restart(None)`: it keeps learning, its
exploration counted in its time). With a controller arm each cell starts a fresh controller
(the fixed table as its prior) that serves the cell's prompts alone for `--warmup` seconds
first, not measured (a serving engine's controller has learned its traffic). A group's time per
arm is its decode time: each batch is first served for one token (its prefill and first
token, which also fills vLLM's prefix cache for every arm) and that is taken off every arm,
since `whatif` predicts the decode steps. The engine makes
vLLM's per-step stats as `vllm serve` does (`disable_log_stats=False`; until 2026-12-05 runs
used the offline default, without them).

The cell's figures, for each arm against the last (`--arms k0,k5`: k0 against k5): the sum of
the arm's decode seconds over the last arm's (the same tokens in both: the last arm's speedup
over it), with a 90% bootstrap interval over the groups, and the median of the per-group
ratios; with two arms they are also the cell's top-level `ratio`, `low`, `high`. `--arms k0,k0`
is the A/A (`--aa W:C:controller`: the controller against itself). Beside them, `priced`:
the same figures with each run priced by its engine steps (`run_pricing.py`: one step-cost
model fitted to the cell's decode steps with a host speed per run, so the drift from run to
run is not in it; every step kept in `NAME.steps.json`), and each arm's measured seconds over
its priced ones. It times the engine: run it alone on the host.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.lib.engine_setup import start_llm
from benchmarks.lib.results import RESULTS_DIR, command, vllm_version, write_json
from benchmarks.lib.step_fit import Step
from benchmarks.lib.workloads import LENGTHS, WORKLOADS, output_lengths, workload_token_ids
from benchmarks.probes.run_pricing import StepLog, encode, interval_of, priced_against_last
from vllm_specdec_plugin.core.step_cost import bucket_label

SEED = 20261202
CONTROLLER = "controller"
"""The arm that runs the schedule controller as it serves (`restart(None)`)."""
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
    return interval_of(ratios)


def run_cell(llm: Any, tokenizer: Any, workload: str, concurrency: int, arms: list[str],
             requests: int, tokens: int, rng: random.Random,
             warmup_s: float = 0.0, lengths: str = "fixed") -> dict[str, Any]:
    from vllm import SamplingParams

    from benchmarks.probes.schedule_switchback import runtime_of

    runtime = runtime_of(llm)
    prompts = [{"prompt_token_ids": ids} for ids in workload_token_ids(tokenizer, workload,
                                                                       requests)]
    decode = [SamplingParams(max_tokens=n, temperature=0.0, ignore_eos=True)
              for n in output_lengths(lengths, tokens, len(prompts))]
    first = SamplingParams(max_tokens=1, temperature=0.0, ignore_eos=True)
    starts = range(0, len(prompts) - concurrency + 1, concurrency)
    groups = [(prompts[start:start + concurrency], decode[start:start + concurrency])
              for start in starts]
    log = StepLog.of(runtime)
    warmup: list[tuple[list[Step], float]] = []  # the warm-up's runs: priced figures' fit
    seen: list[Any] = []
    if CONTROLLER in arms:  # a fresh controller learns the cell's traffic, not measured
        runtime.restart(None, fresh=True)
        record_steps(runtime.controller, seen)
        end = time.perf_counter() + warmup_s
        while time.perf_counter() < end:
            for batch, params in groups:
                log.start()
                timed(llm, batch, params)
                warmup.append(log.take())
                if time.perf_counter() >= end:
                    break
    distinct = list(dict.fromkeys(arms))
    runs: list[dict[str, list[float]]] = []  # per group: each arm's decode seconds
    steps: list[dict[str, tuple[list[Step], float]]] = []  # per group: each run's steps
    for batch, params in groups:
        group: dict[str, list[float]] = {arm: [] for arm in distinct}
        group_steps: dict[str, tuple[list[Step], float]] = {}
        # The prefill first: every arm then finds the batch's prompts in vLLM's prefix cache
        # (the arm served first paid their prefill alone until 2026-12-06).
        hold(runtime, arms[0])
        prefill = timed(llm, batch, first)
        # every arm once in a drawn order; the A/A (one arm) twice
        for arm in rng.sample(distinct, len(distinct)) if len(distinct) > 1 else arms:
            hold(runtime, arm)
            log.start()
            group[arm].append(timed(llm, batch, params))
            group_steps[arm if arm not in group_steps else arm + "#2"] = log.take()
        runs.append({arm: [t - prefill for t in times] for arm, times in group.items()})
        steps.append(group_steps)
    if len(distinct) == 1:  # the A/A: a group's first run against its second
        per_arm = {arms[0]: [(group[arms[0]][0], group[arms[0]][-1]) for group in runs]}
    else:
        per_arm = {arm: [(group[arm][0], group[arms[-1]][0]) for group in runs]
                   for arm in distinct[:-1]}
    against = {arm: figures(pairs, rng) for arm, pairs in per_arm.items()}
    top = against[arms[0]]
    return {"workload": workload, "concurrency": concurrency, "arms": arms,
            "pairs": top["pairs"], "ratio": top["ratio"], "low": top["low"],
            "high": top["high"], "median_pair_ratio": top["median_pair_ratio"],
            "seconds": [sum(a for a, _ in per_arm[arms[0]]),
                        sum(b for _, b in per_arm[arms[0]])],
            "against_last": against,
            "priced": priced_against_last(steps, arms, figures, random.Random(SEED), warmup),
            "steps": encode(steps),
            "warmup_steps": encode([{CONTROLLER: run} for run in warmup]),
            "controller_steps": {"prior": list(runtime.prior), "k_set": list(runtime.k_set),
                                 "max_graph_tokens": runtime.graph_tokens, "steps": seen},
            **(controller_after(runtime.controller) if CONTROLLER in arms
               else dict.fromkeys(AFTER))}


AFTER = ("table_after", "explore_share", "switches", "pairs", "unpaired", "counted_pairs",
         "history", "estimates")


def controller_after(controller: Any) -> dict[str, dict[str, Any]]:
    """Per bucket after a cell: the controller's k, its share of steps explored, its switches,
    each other k's pairs since the bucket's last switch, its explorations dropped unpaired
    (the bucket went stale before the incumbent block after them: a short visit), its pairs
    priced on one text from vLLM's counts (`pair_price.counted_times`) and its switches'
    history (the bucket's measured steps then, the new k; the warm-up's steps included), and
    each other k's estimate against the incumbent now: its mean gain, the lower bound a switch
    needs past the margin (at 1 - alpha; None below two pairs) and the effective number of
    its pairs."""
    buckets = sorted(controller.buckets.items())
    alpha = controller.params.alpha

    def estimate(arm: Any) -> dict[str, float | None]:
        low = arm.bounds(1.0 - alpha)[0]
        return {"gain": round(arm.gain, 4), "low": round(low, 4) if math.isfinite(low) else None,
                "n_eff": round(arm.n_eff(), 1)}

    return {"table_after": {bucket_label(key): state.incumbent for key, state in buckets},
            "explore_share": {bucket_label(key): round(state.explore_steps / state.steps, 3)
                              for key, state in buckets if state.steps},
            "switches": {bucket_label(key): state.switches for key, state in buckets},
            "pairs": {bucket_label(key): {f"k{k}": arm.pairs for k, arm in state.arms.items()
                                          if k != state.incumbent} for key, state in buckets},
            "unpaired": {bucket_label(key): state.unpaired for key, state in buckets},
            "counted_pairs": {bucket_label(key): state.counted_pairs for key, state in buckets},
            "history": {bucket_label(key): state.history for key, state in buckets},
            "estimates": {bucket_label(key): {f"k{k}": estimate(arm) for k, arm in
                                              state.arms.items() if k != state.incumbent}
                          for key, state in buckets}}


def record_steps(controller: Any, seen: list[Any]) -> None:
    """Keep every `Step` the controller is handed (warm-up and runs, in order), as a list:
    batch, k, seconds (not rounded), tokens, drafted, clean, drafts, accepted per position;
    between them the count of other arms' steps it was told of in a row (`interrupt`). The
    controller is pure, so a fresh one (the runtime's prior, k set and graph ceiling, kept
    beside them) fed these replays its every pair offline (the priced figures' steps,
    `StepLog`, carry no counts)."""
    observe, interrupt = controller.observe, controller.interrupt

    def recorded(step: Any) -> Any:
        batch, k, seconds, tokens, drafted, clean, drafts, accepted = step
        # full precision: rounded to the microsecond, a replay's fits differ in their last
        # digits and an estimate's fourth decimal can follow (tests/unit/test_replay_pairs.py
        # missed on one seed of three so; the A/A replays of 2026-12-07 missed so, it seems)
        seen.append([batch, k, seconds, tokens, drafted, clean, drafts, list(accepted)])
        return observe(step)

    def interrupted() -> None:  # a fixed arm's step (`Switchback`): counted, in a row
        if seen and isinstance(seen[-1], int):
            seen[-1] += 1
        else:
            seen.append(1)
        interrupt()

    controller.observe, controller.interrupt = recorded, interrupted


def hold(runtime: Any, arm: str) -> None:
    """Run `arm` from the next step: the controller alone, or every bucket at k<N>."""
    runtime.restart(None if arm == CONTROLLER else f"{arm},{arm}", fresh=False)


def figures(pairs: list[tuple[float, float]], rng: random.Random) -> dict[str, Any]:
    """sum(a) / sum(b) over the pairs with its 90% interval, and the median per-pair ratio."""
    low, high = interval(pairs, rng)
    ratios = sorted(a / b for a, b in pairs)
    return {"pairs": len(pairs), "ratio": sum(a for a, _ in pairs) / sum(b for _, b in pairs),
            "low": low, "high": high, "median_pair_ratio": ratios[len(ratios) // 2]}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workloads", type=lambda s: s.split(","), default=list(WORKLOADS))
    parser.add_argument("--concurrency", type=lambda s: [int(c) for c in s.split(",")],
                        default=[1, 4])
    parser.add_argument("--requests", type=int, default=56)
    parser.add_argument("--tokens", type=int, default=96)
    parser.add_argument("--arms", type=lambda s: s.split(","), default=["k0", "k5"])
    parser.add_argument("--aa", default="open_ended:1",
                        help="workload:concurrency[:arm] of the A/A cell (the arm, by default "
                             "the first, against itself)")
    parser.add_argument("--groups", type=int,
                        help="batches per cell (requests = groups * concurrency)")
    parser.add_argument("--warmup", type=float, default=15.0,
                        help="seconds of the controller alone per cell before it is measured "
                             "(with a controller arm)")
    parser.add_argument("--max-num-seqs", type=int, default=32,
                        help="the engine's max_num_seqs: below --concurrency a group runs as a "
                             "queue, a finished request's slot refilled at once (continuous "
                             "batching), not as one closed batch whose tail runs alone")
    parser.add_argument("--lengths", choices=LENGTHS, default="fixed",
                        help="output lengths: --tokens each, or uniform over tokens/5 to "
                             "9*tokens/5 per request (the same in every arm)")
    parser.add_argument("--model", help="a checkpoint directory (default: SmolLM2-135M)")
    parser.add_argument("--out", default=str(RESULTS_DIR / "whatif" / "runs.json"))
    args = parser.parse_args(argv)
    rng = random.Random(SEED)
    llm = start_llm(args.model, args.max_num_seqs,
                    env={"KAITO_ENABLE_SPECULATIVE_DECODING": "true"},
                    disable_log_stats=False)  # as `vllm serve` runs: the O(1) counts
    tokenizer = llm.get_tokenizer()
    timed(llm, [{"prompt_token_ids": [1, 2, 3]}], __import__("vllm").SamplingParams(
        max_tokens=8))  # warm-up
    cells, stepped = [], []
    plan = [(w, c, args.arms) for w in args.workloads for c in args.concurrency]
    if args.aa:
        workload, concurrency, *arm = args.aa.split(":")
        same = arm[0] if arm else args.arms[0]
        plan.append((workload, int(concurrency), [same, same]))
    for workload, concurrency, arms in plan:
        requests = args.groups * concurrency if args.groups else args.requests
        cell = run_cell(llm, tokenizer, workload, concurrency, arms, requests,
                        args.tokens, rng, args.warmup, args.lengths)
        stepped.append({key: cell.pop(key) for key in ("workload", "concurrency", "arms",
                                                        "steps", "warmup_steps",
                                                        "controller_steps")})
        cell = {**{key: stepped[-1][key] for key in ("workload", "concurrency", "arms")},
                **cell}
        cells.append(cell)
        print("CELL", json.dumps(cell), flush=True)
    out = {"meta": {"kind": "run-pairs", "command": command("run_pairs",
                                                            list(argv or sys.argv[1:])),
                    "vllm": vllm_version(), "requests": args.requests, "groups": args.groups,
                    "tokens": args.tokens, "lengths": args.lengths,
                    "max_num_seqs": args.max_num_seqs,
                    "warmup_s": args.warmup, "seed": SEED}, "cells": cells}
    write_json(Path(args.out), out, indent=1)
    # every run's steps, which the priced figures were computed from, one line beside it
    write_json(steps_path(Path(args.out)), {"meta": out["meta"], "cells": stepped})
    return 0


def steps_path(out: Path) -> Path:
    """`NAME.json`'s steps: `NAME.steps.json` (`run_pricing.encode` per cell)."""
    return out.with_name(out.stem + ".steps.json")


if __name__ == "__main__":
    raise SystemExit(main())

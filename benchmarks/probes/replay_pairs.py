"""A run_pairs run's controller replayed offline, pair by pair.

    python -m benchmarks replay_pairs RUN [--out FILE]     (RUN: a run_pairs result, NAME.json)

run_pairs keeps every `Step` its controller was handed, with vLLM's accepted counts, and the
runtime's prior, k set and graph ceiling (`NAME.steps.json`, `controller_steps`; runs from
before the other arms' steps were counted in it replay inexact). The controller
is pure, so a fresh one fed those steps makes the same blocks, pairs and decisions. This probe
does that per cell and keeps each pair as the controller read it: its bucket, explored k and
incumbent, whether it was priced on one text (`counted_times`), its gain and variance floor,
and the three blocks' sums (steps, row-steps, yield, time, drafting share, and from the
counts the drafting rows, their tokens and the smaller k's steps), and the seconds of steps
fed when it was read. Per bucket it keeps the step-time fit and the price of a drafting step
the replay ended with (`prices`); per bucket and arm it
reports the pairs' mean gain and spread, and the spread of each side's time per step, so a
wide pair can be traced to the text or to the time. It checks the replay against the run:
the table after and each arm's estimate must match the cell's (`replay_exact`).

No engine: run anywhere.
"""

from __future__ import annotations

import json
import statistics
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from benchmarks.lib.results import command, write_json
from vllm_specdec_plugin.core.pair_price import Measure, counted_times
from vllm_specdec_plugin.core.schedule_control import ScheduleController
from vllm_specdec_plugin.core.schedule_state import Step
from vllm_specdec_plugin.core.step_cost import bucket_bounds, bucket_label


def block_of(measure: Measure) -> dict[str, Any]:
    """A block's sums as plain data."""
    found: dict[str, Any] = {"steps": measure.steps, "rows": measure.rows,
                             "yields": round(measure.yields, 4),
                             "time": round(measure.time, 4),
                             "drafting": round(measure.drafting, 4)}
    if measure.counts is not None:
        found["counts"] = {"drafting": round(measure.counts.drafting, 4),
                           "tokens": round(measure.counts.tokens, 4),
                           "shorter": {str(k): round(v, 4)
                                       for k, v in measure.counts.shorter.items()},
                           "price": None if measure.counts.price is None
                           else round(measure.counts.price, 6)}
    return found


def fresh(setup: dict[str, Any]) -> ScheduleController:
    """A controller as the run's runtime made it: its prior, k set and graph ceiling."""
    return ScheduleController(setup["prior"], setup["k_set"],
                              max_graph_tokens=setup["max_graph_tokens"])


def feed(controller: ScheduleController, steps: Sequence[Any]) -> Iterator[Step]:
    """Hand `controller` the recorded steps in order (a count of other arms' steps as that
    many `interrupt`s), yielding each `Step` once it has been observed."""
    for step in steps:
        if isinstance(step, int):  # other arms' steps in a row (`Switchback`)
            for _ in range(step):
                controller.interrupt()
            continue
        found = Step(*step)
        controller.observe(found)
        yield found


def replay(setup: dict[str, Any]) -> tuple[ScheduleController, list[dict[str, Any]]]:
    """A fresh controller fed the recorded steps; every pair it read, in order."""
    controller = fresh(setup)
    pairs: list[dict[str, Any]] = []
    paired, observe, fed = controller._paired, controller.observe, [0.0]

    def timed(step: Step) -> None:
        fed[0] += step.seconds  # the steps' seconds up to and with this one
        observe(step)

    def spied(state: Any, pending: Any, after: Measure) -> None:
        arm, explored, before = pending
        incumbent = state.incumbent
        times = counted_times(arm, incumbent, explored, before, after)
        estimate, seen = state.arms[arm], []
        judge = estimate.judge

        def spied_judge(gain: float, *args: Any) -> int:
            seen.append(gain)  # the pair's gain as the controller read it
            return judge(gain, *args)

        estimate.judge = spied_judge  # type: ignore[method-assign]
        try:
            paired(state, pending, after)
        finally:
            del estimate.judge
        gain = seen[0] if seen else None
        pairs.append({"bucket": bucket_label(state.key), "arm": arm, "incumbent": incumbent,
                      "counted": times is not None,
                      "times": None if times is None else [round(t, 5) for t in times],
                      "gain": None if gain is None else round(gain, 5),
                      "switched": state.incumbent != incumbent, "at_s": round(fed[0], 3),
                      "blocks": [block_of(b) for b in (before, explored, after)]})

    controller._paired = spied  # type: ignore[method-assign]
    controller.observe = timed  # type: ignore[method-assign]
    for _ in feed(controller, setup["steps"]):
        pass
    return controller, pairs


def spread(values: Sequence[float]) -> float | None:
    return round(statistics.stdev(values), 4) if len(values) > 1 else None


def summary(pairs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per bucket and arm against its incumbent: pairs, counted ones, mean gain and spread,
    and the spread of each side's time per step (the incumbent's two blocks, the explored)."""
    found: dict[str, Any] = {}
    for pair in pairs:
        key = f"{pair['bucket']} k{pair['arm']} vs k{pair['incumbent']}"
        cell = found.setdefault(key, {"pairs": 0, "counted": 0, "gains": [], "explored_time": [],
                                      "incumbent_time": []})
        cell["pairs"] += 1
        cell["counted"] += pair["counted"]
        if pair["gain"] is not None:
            cell["gains"].append(pair["gain"])
        before, explored, after = pair["blocks"]
        cell["explored_time"].append(explored["time"] / max(explored["steps"], 1))
        cell["incumbent_time"].append((before["time"] + after["time"])
                                      / max(before["steps"] + after["steps"], 1))
    for cell in found.values():
        gains = cell.pop("gains")
        cell["mean_gain"] = round(statistics.fmean(gains), 4) if gains else None
        cell["gain_sd"] = spread(gains)
        for side in ("explored_time", "incumbent_time"):
            times = cell.pop(side)
            mean = statistics.fmean(times)
            cell[f"{side}_cv"] = round(statistics.stdev(times) / mean, 4) if len(
                times) > 1 and mean > 0 else None
    return found


def prices(controller: ScheduleController) -> dict[str, Any]:
    """Per bucket at the end: the step-time fit's (a, b, c) in seconds (`BatchShape.
    coefficients`, None before it fits), its plain step at the bucket's largest batch over its
    smallest (`factor`), and the price of a drafting step the controller's pairs were priced
    with (`StepCostTable.extra`: switch, per drafted token; seconds)."""
    found: dict[str, Any] = {}
    for key, state in sorted(controller.buckets.items()):
        low, high = bucket_bounds(key)
        fitted, extra = state.shape.coefficients(), controller.costs.extra(low)
        found[bucket_label(key)] = {
            "fit": None if fitted is None else [
                None if x is None else round(x, 6) for x in fitted],
            "batch_ratio": round(state.shape.factor(high) / state.shape.factor(low), 4),
            "drafting_price": None if extra is None else [round(x, 6) for x in extra]}
    return found


def estimate_misses(controller: ScheduleController, cell: dict[str, Any]
                    ) -> list[tuple[str, str, float, float]]:
    """(bucket, arm, the run's gain, the replay's) for each other arm's estimate the replay
    ends elsewhere on (run_pairs' `estimates`, where the run reported them; to 4 decimals)."""
    buckets = {bucket_label(key): state for key, state in controller.buckets.items()}
    misses = []
    for label, arms in (cell.get("estimates") or {}).items():
        for name, found in arms.items():
            gain = round(buckets[label].arms[int(name[1:])].gain, 4)
            if gain != found["gain"]:
                misses.append((label, name, found["gain"], gain))
    return misses


def replay_exact(controller: ScheduleController, cell: dict[str, Any]) -> bool:
    """Whether the replay ends where the run did: the table after, and each other arm's
    estimate (`estimate_misses`)."""
    table = {bucket_label(key): state.incumbent for key, state in controller.buckets.items()}
    return table == cell.get("table_after") and not estimate_misses(controller, cell)


def main(argv: Sequence[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m benchmarks replay_pairs")
    parser.add_argument("run", help="a run_pairs result (NAME.json; NAME.steps.json beside it)")
    parser.add_argument("--out", help="write the pairs and the summary here (JSON)")
    args = parser.parse_args(argv)
    run = Path(args.run)
    cells = json.loads(run.read_text())["cells"]
    stepped = json.loads(run.with_name(run.stem + ".steps.json").read_text())["cells"]
    report = []
    for cell, steps in zip(cells, stepped, strict=True):
        setup = steps.get("controller_steps")
        if not setup:
            continue
        controller, pairs = replay(setup)
        entry = {"workload": cell["workload"], "concurrency": cell["concurrency"],
                 "arms": cell["arms"], "replay_exact": replay_exact(controller, cell),
                 "misses": estimate_misses(controller, cell), "prices": prices(controller),
                 "summary": summary(pairs), "pairs": pairs}
        report.append(entry)
        print(json.dumps({k: v for k, v in entry.items() if k != "pairs"}, indent=1))
    if args.out:
        write_json(Path(args.out), {"meta": {"kind": "replay-pairs", "command": command(
            "replay_pairs", list(argv or sys.argv[1:]))}, "cells": report}, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""`run_pairs`' arms priced by their engine steps (`benchmarks/lib/step_fit.py`): the steps
each run asked of the engine, recorded at the controller runtime's `observe`, priced by one
step-cost model fitted to the cell's decode steps, each run on a host speed of its own.

    python -m benchmarks run_pricing NAME.steps.json [--fit one-speed|no-warmup] [--out FILE]

prices a `run_pairs` step file again (no engine): as `run_pairs` did, or with a variant of the
fit (`one-speed`: one host speed for every run, the mutant that reads drift as cost;
`no-warmup`: the measured runs alone), each cell's `priced` figures to `--out`.

A run's steps are timed as the runtime times them (the end of one update to the end of the
next), the first from the moment the run was handed to the engine.
"""

from __future__ import annotations

import argparse
import math
import random
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.lib.step_fit import (
    Step,
    StepArrays,
    arrays,
    fit_arrays,
    fit_by_k,
    measured_share,
    priced,
    run_speed,
    step_prices,
    switching,
)
from vllm_specdec_plugin.core.step_cost import StepCostCurve


class StepLog:
    """Every step the engine runs, as `Step`s, from `start()` to `take()`; attached once per
    runtime by wrapping its `observe` (what the step does otherwise is unchanged)."""

    def __init__(self, runtime: Any) -> None:
        self.runtime = runtime
        self.steps: list[Step] = []
        self.previous_end = self.own_from = 0.0
        observe = runtime.observe

        def logged(output: Any, runner_output: Any, result: Any, end: float,
                   finished: Any = ()) -> None:
            rows = len(output.num_scheduled_tokens)
            if rows:
                spec = output.scheduled_spec_decode_tokens
                drafted = sum(map(len, spec.values())) if spec else 0
                self.steps.append(Step(rows, drafted,
                                       output.total_num_scheduled_tokens - rows - drafted,
                                       end - self.previous_end,
                                       output.num_spec_tokens_to_schedule))
                self.previous_end = end
            observe(output, runner_output, result, end, finished)

        runtime.observe = logged

    @classmethod
    def of(cls, runtime: Any) -> StepLog:
        """The runtime's log, attached on the first call."""
        found = getattr(runtime, "_run_pairs_step_log", None)
        if found is None:
            found = runtime._run_pairs_step_log = cls(runtime)
        return found  # type: ignore[no-any-return]

    def start(self) -> None:
        self.steps = []
        self.own_from = self.runtime.own_s
        self.previous_end = time.perf_counter()

    def take(self) -> tuple[list[Step], float]:
        """The run's steps, and the seconds the runtime's `observe` took on the engine thread
        in it (this log's own share included, alike in every arm)."""
        steps, self.steps = self.steps, []
        return steps, self.runtime.own_s - self.own_from


RESAMPLES = 200
"""Resamples of the priced interval's bootstrap (each fits the costs again)."""


Runs = Sequence[dict[str, tuple[list[Step], float]]]
"""Per group, each run (an arm's; the A/A's second as `arm#2`): its steps and the runtime's
own seconds in it."""


def priced_against_last(runs: Runs, arms: Sequence[str],
                        figures: Callable[[list[tuple[float, float]], random.Random],
                                          dict[str, Any]],
                        rng: random.Random, warmup: Sequence[tuple[list[Step], float]] = (),
                        resamples: int = RESAMPLES, per_run: bool = True
                        ) -> dict[str, Any] | None:
    """Each arm's decode steps priced (one fit to every run of the cell), plus the runtime's
    own seconds, against the last arm's, in `figures`' form; with one arm (the A/A) a group's
    first run against its second. The fit also takes the controller's `warmup` runs (not
    measured, but the same host and traffic, and they switch k far more often than the
    measured runs: at c=1 with 4% of steps explored, a measured controller run of about 20
    steps seldom holds an exploration block). The interval is a bootstrap over the groups (and
    the warm-up's runs, drawn apart) that fits the costs again on each resample, so it holds
    the fit's own error too. Beside them, per arm, its measured seconds over its priced ones
    and the runtime's own seconds; with a controller arm, `model_error` and each arm's run
    speed (`slowdown`). None where no run switches k (a cell of fixed arms alone): nothing
    then prices k>0 against k=0 but the runs' own times."""
    # whether each group, and each warm-up run, holds a run that switches k (once, not per
    # resample)
    group_switches = [switching(steps for steps, _ in group.values()) for group in runs]
    warm_switches = [switching([steps]) for steps, _ in warmup]
    if not any(group_switches) and not any(warm_switches):
        return None
    distinct = list(dict.fromkeys(arms))
    against = ({distinct[0]: distinct[0] + "#2"} if len(distinct) == 1
               else {arm: arms[-1] for arm in distinct[:-1]})
    cached = [{key: (arrays(steps), own) for key, (steps, own) in group.items()}
              for group in runs]
    warm = [{"warmup": (arrays(steps), own)} for steps, own in warmup]
    curve = fit(cached + warm, per_run)
    out: dict[str, Any] = {"against_last": {}}
    drawn: dict[str, list[float]] = {arm: [] for arm in against}
    for _ in range(resamples):
        at = [rng.randrange(len(runs)) for _ in runs]
        at_warm = [rng.randrange(len(warmup)) for _ in warmup]
        if not any(group_switches[i] for i in at) and not any(warm_switches[i] for i in at_warm):
            continue
        sample = [cached[i] for i in at]
        refit = fit(sample + [warm[i] for i in at_warm], per_run)
        for arm, last in against.items():
            drawn[arm].append(_total(refit, sample, arm) / _total(refit, sample, last))
    for arm, last in against.items():
        found = figures([(_seconds(curve, g, arm), _seconds(curve, g, last)) for g in cached],
                        rng)
        if drawn[arm]:
            found["low"], found["high"] = interval_of(drawn[arm])
        found["resamples"] = len(drawn[arm])
        found["warmup_runs"] = len(warmup)
        out["against_last"][arm] = found
    keys = list(dict.fromkeys(k for g in runs for k in g))
    out["measured_share"] = {k: _round(measured_share(curve, [s for g in runs for s in g[k][0]]))
                             for k in keys}
    out["own_s"] = {k: _round(sum(g[k][1] for g in runs)) for k in keys}
    if "controller" in distinct:
        out.update(model_error(curve, [g[key][0] for g in cached for key in g
                                       if key.startswith("controller")],
                               [run for run, _ in (w["warmup"] for w in warm)]))
        if len(distinct) > 1:
            out["run_speed_by_arm"] = slowdown(curve, cached, rng)
    return out


def slowdown(curve: StepCostCurve, runs: Cached, rng: random.Random) -> dict[str, Any]:
    """What no step's shape shows, per arm: per group, the arm's run's speed (`run_speed`)
    over the other fixed arms' (their geometric mean), as a log; its mean (above 0: the arm's
    steps ran slower than other arms' steps of the same shape in the same group) with a 90%
    bootstrap interval, and every group's value.
    The fixed arms' own figures are the yardstick: what the model's error between arms alone
    makes of a run's speed."""
    def speed(run: StepArrays) -> float:
        return math.log(run_speed(curve, run))

    out: dict[str, Any] = {}
    for arm in dict.fromkeys(key for group in runs for key in group):
        values = []
        for group in runs:
            others = [speed(run) for key, (run, _) in group.items()
                      if key not in (arm, "controller") and len(run.rows)]
            if others and len(group[arm][0].rows):
                values.append(speed(group[arm][0]) - float(np.mean(others)))
        low = high = None
        if values:
            low, high = interval_of([
                sum(values[rng.randrange(len(values))] for _ in values) / len(values)
                for _ in range(RESAMPLES)])
        out[arm] = {"mean_log": _round(sum(values) / len(values)) if values else None,
                    "low": _round(low), "high": _round(high),
                    "per_group": [round(v, 5) for v in values]}
    return out


def model_error(curve: StepCostCurve, measured: Sequence[StepArrays],
                warmup: Sequence[StepArrays]) -> dict[str, Any]:
    """What the model's error by k could move the controller's priced seconds by: each k's
    share of them (its measured runs), the model's error at each k (`fit_by_k` over its
    measured and warm-up runs), and their product summed over the k other than the one it
    spent most at, relative to that one's error (ratio points, one side: a k priced 5% too
    high on 10% of the seconds moves the figure by about 0.5 points)."""
    shares: dict[int, float] = {}
    for run in measured:
        prices = step_prices(curve, run)
        for k in np.unique(run.k):
            shares[int(k)] = shares.get(int(k), 0.0) + float(prices[run.k == k].sum())
    total = sum(shares.values())
    errors = fit_by_k(curve, [*measured, *warmup])
    if not total or not errors:
        return {}
    top = max(shares, key=lambda k: shares[k])
    points = 100 * sum(share / total * abs(errors[k][0] / errors[top][0] - 1)
                       for k, share in shares.items() if k != top and k in errors)
    return {"controller_priced_share_by_k": {f"k{k}": _round(v / total)
                                             for k, v in sorted(shares.items())},
            "controller_fit_by_k": {f"k{k}": {"median": _round(m), "steps": n}
                                    for k, (m, n) in errors.items()},
            "model_error_points": _round(points)}


Cached = Sequence[dict[str, tuple[StepArrays, float]]]


def fit(runs: Cached, per_run: bool = True) -> StepCostCurve:
    return fit_arrays([steps for group in runs for steps, _ in group.values()],
                      "the cell's steps", per_run=per_run)


def _seconds(curve: StepCostCurve, group: dict[str, tuple[StepArrays, float]], key: str
             ) -> float:
    steps, own = group[key]
    return priced(curve, steps) + own


def _total(curve: StepCostCurve, runs: Cached, key: str) -> float:
    return sum(_seconds(curve, group, key) for group in runs)


def encode(runs: Runs) -> list[dict[str, Any]]:
    """The runs as the result file keeps them: per group, per run `{"own_s", "steps"}`, each
    step `[rows, drafted, prefill, seconds, k]` (seconds to the microsecond)."""
    return [{key: {"own_s": round(own, 6),
                   "steps": [[s.rows, s.drafted, s.prefill, round(s.seconds, 6), s.k]
                             for s in steps]}
             for key, (steps, own) in group.items()} for group in runs]


def decode(groups: list[dict[str, Any]]) -> list[dict[str, tuple[list[Step], float]]]:
    """`encode`'s form back to runs."""
    return [{key: ([Step(*step) for step in run["steps"]], run["own_s"])
             for key, run in group.items()} for group in groups]


def interval_of(draws: Sequence[float]) -> tuple[float, float]:
    """The 90% percentile interval of a bootstrap's draws (`run_pairs.interval`'s too)."""
    ranked = sorted(draws)
    return ranked[int(0.05 * len(ranked))], ranked[int(0.95 * len(ranked)) - 1]


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


FITS = ("as-run", "one-speed", "no-warmup")


def main(argv: Sequence[str] | None = None) -> int:
    import json

    from benchmarks.lib.results import command, write_json
    from benchmarks.probes.run_pairs import SEED, figures

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("steps", help="a run_pairs NAME.steps.json")
    parser.add_argument("--fit", choices=FITS, default="as-run")
    parser.add_argument("--out", help="write the cells' priced figures here (JSON)")
    args = parser.parse_args(argv)
    document = json.loads(Path(args.steps).read_text())
    cells = []
    for cell in document["cells"]:
        warmup = [group["controller"] for group in decode(cell["warmup_steps"])]
        priced_cell = priced_against_last(
            decode(cell["steps"]), cell["arms"], figures, random.Random(SEED),
            () if args.fit == "no-warmup" else warmup,
            per_run=args.fit != "one-speed")
        cells.append({key: cell[key] for key in ("workload", "concurrency", "arms")}
                     | {"priced": priced_cell})
        shown = {arm: f"{e['ratio']:.3f} [{e['low']:.3f}, {e['high']:.3f}]"
                 for arm, e in (priced_cell or {}).get("against_last", {}).items()}
        print(cell["workload"], cell["concurrency"], shown, flush=True)
    if args.out:
        write_json(Path(args.out), {"meta": {"kind": "run-pricing", "fit": args.fit,
                                             "steps": args.steps, "command": command(
                                                 "run_pricing", list(argv or sys.argv[1:]))},
                                    "cells": cells}, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

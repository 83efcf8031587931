"""Price a run by its engine steps: the step-cost model (`core/step_cost.StepCostCurve`, the one
that prices a step everywhere) fitted to the decode steps of one benchmark cell, all arms.

Why: on this shared 2-core host the cores' speed drifts ±5-15% from one run to the next, so a
whole run's seconds compare two arms to within 6-10 points at c=16/32, where the target is 2.
What a run asks of the engine (how many steps, at which batch sizes, at which k, verifying how
many draft tokens) does not drift. Priced by one cost model, an arm's run costs what it asked,
at one host speed for all.

The model's costs must not carry the drift either. A single fit to all steps would: the
relative price of a step at k>0 and one at k=0 would then be set by how fast the host ran the
fixed k=5 runs against the fixed k=0 runs, which is the timed comparison again, behind an
interval that no longer shows its noise (`tests/unit/test_step_fit.py`, the one-speed mutant).
So each run has a speed of its own (a factor on all its steps, fitted with the costs) and the
costs are set only by how steps of one run differ from each other: a fixed run's batch sizes
and drafted tokens, and above all the controller's runs, which switch k every few steps (its
blocks), the switchback grain. A cell with no run that switches k is not priced (`switching`).

What it cannot see: a cost no step's shape shows. A run's own speed absorbs anything that
slows all of its steps alike: the controller's own bookkeeping on the engine thread (which
`run_pricing` adds back as measured) or its decision thread competing for a core (not added).
`measured_share` (measured over priced seconds) says how far each arm's steps sat from the
model; the timed ratio stays the headline and the priced one is read beside it
(docs/schedule-controller.md, "Priced by their steps").

The fit, per batch-size bucket, is `StepCostCurve`'s own form: a decode step of `rows` rows run
at k verifying `drafted` draft tokens costs
`no_draft_s * (F + rows) / (F + r0) + switch_s * [k > 0] + per_token_s * drafted`: the switch
term is what a step at k>0 pays whatever it drafted (the drafter runs after it). Least squares,
then once again without the steps whose residual is beyond `TRIM` robust standard deviations (a
stall priced into the fit would price every arm's steps at it). A step with a prompt chunk is
left out of fit and price: every arm runs each request's first step alike.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import NamedTuple

import numpy as np

from vllm_specdec_plugin.core.step_cost import (
    STEP_COST_DEFAULTS,
    BucketCost,
    StepCostCurve,
    bucket,
)

ROUNDS = 12
"""Rounds at most of the alternating fit (costs given the runs' speeds, speeds given the
costs) ..."""
SETTLED = 1e-4
"""... which stops once no run's speed moved by more than this in a round."""
TRIM = 4.0
"""Steps whose residual is beyond this many robust standard deviations (1.4826 MAD) of their
bucket's first fit leave the second."""


class Step(NamedTuple):
    """One engine step as the controller's runtime saw it."""

    rows: int
    drafted: int
    """Draft tokens verified (all rows)."""
    prefill: int
    """Prompt tokens scheduled besides each row's one token and its drafts."""
    seconds: float
    k: int = 0
    """The step's k (`num_spec_tokens_to_schedule`); not priced, kept to read residuals by k."""


def _solve(x: np.ndarray, y: np.ndarray, trim: float | None) -> np.ndarray:
    """Least squares, then with `trim` once again without the outlying steps."""
    coef: np.ndarray = np.linalg.lstsq(x, y, rcond=None)[0]
    if trim is not None:
        residual = y - x @ coef
        scale = 1.4826 * float(np.median(np.abs(residual - np.median(residual))))
        keep = np.abs(residual) <= trim * scale if scale > 0 else np.ones(len(y), dtype=bool)
        if keep.sum() >= 3 and not keep.all():
            coef = np.linalg.lstsq(x[keep], y[keep], rcond=None)[0]
    return coef


def _buckets(rows: np.ndarray) -> np.ndarray:
    """`bucket` of each entry of `rows`."""
    keys: np.ndarray = np.floor(np.log2(np.maximum(rows, 1.0))).astype(np.int64) + 1
    return keys


def switching(runs: Iterable[Sequence[Step]]) -> bool:
    """Whether some run holds decode steps at k=0 and at k>0 in one bucket: the only steps
    that price speculating against not, with the host's drift between runs out of it."""
    for steps in runs:
        seen: dict[int, set[bool]] = {}
        for step in steps:
            if not step.prefill:
                seen.setdefault(bucket(step.rows), set()).add(step.k > 0)
        if any(len(found) == 2 for found in seen.values()):
            return True
    return False


class StepArrays(NamedTuple):
    """A run's decode steps as arrays (made once, priced and fitted many times)."""

    rows: np.ndarray
    speculating: np.ndarray
    """1.0 where the step ran at k > 0."""
    drafted: np.ndarray
    seconds: np.ndarray
    k: np.ndarray


def arrays(steps: Iterable[Step]) -> StepArrays:
    """The decode steps of a run (a step with a prompt chunk is left out, fit and price: each
    request has its first in every arm alike)."""
    decode = [s for s in steps if not s.prefill]
    return StepArrays(np.array([s.rows for s in decode], dtype=np.float64),
                      np.array([s.k > 0 for s in decode], dtype=np.float64),
                      np.array([s.drafted for s in decode], dtype=np.float64),
                      np.array([s.seconds for s in decode], dtype=np.float64),
                      np.array([s.k for s in decode], dtype=np.int64))


def fit_curve(runs: Sequence[Sequence[Step]], source: str,
              fixed: float = STEP_COST_DEFAULTS.prior_fixed_tokens,
              trim: float | None = TRIM, rounds: int = ROUNDS,
              per_run: bool = True) -> StepCostCurve:
    """`fit_arrays` of the runs' decode steps."""
    return fit_arrays([arrays(steps) for steps in runs], source, fixed, trim, rounds, per_run)


def fit_arrays(runs: Sequence[StepArrays], source: str,
               fixed: float = STEP_COST_DEFAULTS.prior_fixed_tokens,
               trim: float | None = TRIM, rounds: int = ROUNDS,
               per_run: bool = True) -> StepCostCurve:
    """One `BucketCost` per batch-size bucket the decode steps fill, each run of steps on a
    host of its own speed (a factor on every step of the run, found with the costs by
    alternating least squares, `rounds` times; their step-weighted mean is 1: the curve prices
    at the runs' mean speed). The costs are then set by how steps of one run differ from each
    other, never by how one run's speed differs from another's. `per_run=False`: one speed for
    all runs (the mutant that reads the drift as cost)."""
    runs = [run for run in runs if len(run.rows)]
    if not runs:
        raise ValueError("no decode step to fit")
    rows = np.concatenate([run.rows for run in runs])
    seconds = np.concatenate([run.seconds for run in runs])
    columns = np.column_stack([rows, np.concatenate([run.speculating for run in runs]),
                               np.concatenate([run.drafted for run in runs])])
    keys = _buckets(rows)
    ends = np.cumsum([len(run.rows) for run in runs])
    speed = np.ones(len(rows))
    predicted = np.empty(len(rows))
    buckets: dict[int, BucketCost] = {}
    for _ in range(rounds if per_run else 1):
        for key in np.unique(keys):
            at = keys == key
            rows0 = float(rows[at].mean())
            x = columns[at].copy()
            x[:, 0] = (fixed + x[:, 0]) / (fixed + rows0)
            coef = _solve(x, seconds[at] / speed[at], trim)
            predicted[at] = x @ coef
            buckets[int(key)] = BucketCost(float(coef[0]), float(coef[1]), float(coef[2]),
                                           rows0)
        # a run's speed: the median of its steps' measured over priced seconds (a stall in it
        # does not move it), their step-weighted mean 1
        ratio = seconds / np.maximum(predicted, 1e-12)
        before = speed.copy()
        for start, end in zip(np.concatenate([[0], ends[:-1]]), ends, strict=True):
            speed[start:end] = float(np.median(ratio[start:end]))
        speed /= speed.mean()
        if float(np.max(np.abs(speed - before))) < SETTLED:
            break
    return StepCostCurve(buckets, source, frozenset(buckets), fixed)


def step_prices(curve: StepCostCurve, run: StepArrays) -> np.ndarray:
    """The seconds the curve gives each decode step: the switch term is paid by a step run at
    k > 0 (its drafter runs after it, and its drafts are verified), each draft token verified
    at the per-token price (`StepCostCurve.seconds`, done by array)."""
    out = np.zeros(len(run.rows))
    keys = _buckets(run.rows)
    for key in np.unique(keys):
        at = keys == key
        cost, f = curve.at(int(run.rows[at][0])), curve.fixed_tokens
        out[at] = (cost.no_draft_s * (f + run.rows[at]) / (f + cost.rows)
                   + run.speculating[at] * cost.switch_s + cost.per_token_s * run.drafted[at])
    return out


def priced(curve: StepCostCurve, steps: Iterable[Step] | StepArrays) -> float:
    """The seconds the curve gives these steps' decode steps (`step_prices`)."""
    return float(step_prices(curve, steps if isinstance(steps, StepArrays)
                             else arrays(steps)).sum())


def run_speed(curve: StepCostCurve, run: StepArrays) -> float:
    """A run's host speed against the curve: the median of its decode steps' measured over
    priced seconds (a stall in it does not move it)."""
    return float(np.median(run.seconds / np.maximum(step_prices(curve, run), 1e-12)))


def fit_by_k(curve: StepCostCurve, runs: Sequence[StepArrays]) -> dict[int, tuple[float, int]]:
    """The model's error by k, drift left out: per k, the median over the runs' decode steps
    of measured over priced seconds, each over its run's speed (`run_speed`), and how many
    steps. 1 for every k: the curve prices a step at each k as it ran against the
    other steps of its run."""
    ratios: list[np.ndarray] = []
    ks: list[np.ndarray] = []
    for run in runs:
        if len(run.rows):
            ratios.append(run.seconds / np.maximum(step_prices(curve, run), 1e-12)
                          / run_speed(curve, run))
            ks.append(run.k)
    if not ratios:
        return {}
    ratio, k = np.concatenate(ratios), np.concatenate(ks)
    return {int(key): (float(np.median(ratio[k == key])), int(np.sum(k == key)))
            for key in np.unique(k)}


def measured_share(curve: StepCostCurve, steps: Sequence[Step]) -> float | None:
    """The decode steps' measured seconds over their priced seconds (1: the model prices them
    as they ran, on the average host of the fit)."""
    total = priced(curve, steps)
    measured = sum(s.seconds for s in steps if not s.prefill)
    return measured / total if total > 0 else None

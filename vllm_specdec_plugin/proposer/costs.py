"""What an engine step costs: a measured table by batch size and drafted tokens.

Pure Python, no vLLM. `proposer.py` feeds it one sample per clean decode cycle: the time from
the start of one `propose` call to the start of the next, i.e. the proposer's own time plus the
engine step that verified what it proposed (the cost the user waits for, not only the GPU's or
CPU's share of it). Per batch-size bucket (1, 2-3, 4-7, 8-15, ...) it keeps

- the no-draft step time (a moving average; scaled within the bucket by rows), kept fresh by a
  forced no-draft step when it is older than `BASELINE_EVERY` of the bucket's cycles, so the
  baseline every drafting decision compares with is measured, not inferred from drafting steps;
- the extra time of drafting steps over that baseline, fitted as `switch + per_token * drafted`
  (a decayed two-parameter least squares, refitted at most every `REFIT_EVERY` samples), with
  the prior as pseudo-observations until drafting steps of varied lengths pin it down.

The prior: a step costs as much as `PRIOR_FIXED_TOKENS` verified tokens before the first token
(measured about 16 on the CPU test engine; GPUs at small batch are far higher), and a drafting
step pays `PRIOR_SWITCH_FRACTION` of a step extra (the rejection sampler and the spec metadata).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

PRIOR_FIXED_TOKENS = 16.0
PRIOR_SWITCH_FRACTION = 0.05
# Moving-average weight of a new no-draft sample.
BASE_WEIGHT = 0.2
# Decay of the drafting-step sums per sample (the last ~50 drafting cycles of a bucket count).
FIT_DECAY = 0.98
# The prior's weight in pseudo-samples, and the floor on the fitted slope (share of the prior).
PRIOR_SAMPLES = 4.0
MIN_SLOPE_SHARE = 0.25
REFIT_EVERY = 8
# A bucket's no-draft time older than this many of its cycles is measured again.
BASELINE_EVERY = 64


def bucket(rows: int) -> int:
    """Batch-size bucket: 1 -> 1, 2-3 -> 2, 4-7 -> 3, 8-15 -> 4, ..."""
    return max(int(rows), 1).bit_length()


@dataclass
class _Bucket:
    base_s: float = 0.0
    base_rows: float = 0.0
    base_samples: int = 0
    since_base: int = 0
    # Decayed sums of drafting samples: weight, d, d*d, extra, d*extra.
    n: float = 0.0
    sd: float = 0.0
    sdd: float = 0.0
    se: float = 0.0
    sde: float = 0.0
    since_fit: int = REFIT_EVERY
    fit: tuple[float, float] | None = None


class StepCostTable:
    """Seconds per decode cycle by (batch size, drafted tokens); see the module docstring."""

    def __init__(self) -> None:
        self._buckets: dict[int, _Bucket] = {}
        self.samples = 0

    def _bucket(self, rows: int) -> _Bucket:
        key = bucket(rows)
        found = self._buckets.get(key)
        if found is None:
            found = self._buckets[key] = _Bucket()
        return found

    def baseline(self, rows: int) -> float | None:
        """Seconds of a no-draft cycle at `rows` rows, or None before one was measured."""
        cell = self._buckets.get(bucket(rows))
        if cell is None or not cell.base_samples:
            return None
        return cell.base_s * (PRIOR_FIXED_TOKENS + rows) / (PRIOR_FIXED_TOKENS + cell.base_rows)

    def wants_baseline(self, rows: int) -> bool:
        """Whether the next cycle at `rows` should draft nothing, to measure the baseline."""
        cell = self._buckets.get(bucket(rows))
        return cell is None or not cell.base_samples or cell.since_base >= BASELINE_EVERY

    def observe(self, rows: int, drafted: int, seconds: float) -> None:
        """One clean cycle: `rows` rows decoded, `drafted` tokens verified besides them."""
        cell = self._bucket(rows)
        self.samples += 1
        if drafted <= 0:
            if cell.base_samples:
                cell.base_s += BASE_WEIGHT * (seconds - cell.base_s)
                cell.base_rows += BASE_WEIGHT * (rows - cell.base_rows)
            else:
                cell.base_s, cell.base_rows = seconds, float(rows)
            cell.base_samples += 1
            cell.since_base = 0
            return
        cell.since_base += 1
        base = self.baseline(rows)
        if base is None:
            return  # nothing to measure the extra against yet
        extra, d, f = seconds - base, float(drafted), FIT_DECAY
        cell.n = cell.n * f + 1.0
        cell.sd = cell.sd * f + d
        cell.sdd = cell.sdd * f + d * d
        cell.se = cell.se * f + extra
        cell.sde = cell.sde * f + d * extra
        cell.since_fit += 1

    def extra(self, rows: int) -> tuple[float, float] | None:
        """(switch, per_token): a drafting cycle's seconds over the baseline at `rows`."""
        base = self.baseline(rows)
        if base is None:
            return None
        cell = self._bucket(rows)
        if cell.fit is not None and cell.since_fit < REFIT_EVERY:
            return cell.fit
        slope0 = base / (PRIOR_FIXED_TOKENS + rows)
        switch0 = PRIOR_SWITCH_FRACTION * base
        mean_d = cell.sd / cell.n if cell.n else float(rows)
        n, sd, sdd, se, sde = cell.n, cell.sd, cell.sdd, cell.se, cell.sde
        for d in (max(1.0, mean_d / 2), 2 * mean_d + 1):  # the prior, as two pseudo-samples
            w = PRIOR_SAMPLES / 2
            e = switch0 + slope0 * d
            n, sd, sdd, se, sde = n + w, sd + w * d, sdd + w * d * d, se + w * e, sde + w * d * e
        det = n * sdd - sd * sd
        slope = (n * sde - sd * se) / det if det > 1e-12 else slope0
        slope = max(slope, MIN_SLOPE_SHARE * slope0)
        switch = max((se - slope * sd) / n, 0.0)
        cell.fit, cell.since_fit = (switch, slope), 0
        return cell.fit

    def seconds(self, rows: int, drafted: np.ndarray) -> np.ndarray | None:
        """Predicted cycle seconds for each entry of `drafted` (tokens drafted in the step)."""
        base = self.baseline(rows)
        fit = self.extra(rows)
        if base is None or fit is None:
            return None
        switch, slope = fit
        d = np.asarray(drafted, dtype=np.float64)
        return base + np.where(d > 0, switch + slope * d, 0.0)

    def summary(self) -> dict[str, dict[str, float | int | None]]:
        """Per bucket: no-draft seconds, samples, and the fitted switch and per-token cost."""
        out: dict[str, dict[str, float | int | None]] = {}
        for key in sorted(self._buckets):
            cell = self._buckets[key]
            rows = 1 << (key - 1)
            fit = self.extra(max(rows, int(round(cell.base_rows)) or rows))
            out[f"rows>={rows}"] = {
                "no_draft_s": cell.base_s if cell.base_samples else None,
                "no_draft_samples": cell.base_samples,
                "drafting_samples": round(cell.n, 1),
                "switch_s": None if fit is None else fit[0],
                "per_token_s": None if fit is None else fit[1]}
        return out

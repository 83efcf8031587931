"""The statistics of a paired comparison: percentiles and the percentile-bootstrap interval of a
median (deterministic: a fixed seed). Shared by the in-engine switchback measurement
(`core/switchback.py`) and the benchmarks (`benchmarks/lib/stats.py`)."""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Sequence

BOOTSTRAP_RESAMPLES = 10000
BOOTSTRAP_SEED = 0
LEVEL = 0.90


def percentile(values: Sequence[float], q: float) -> float | None:
    """The q-th percentile (0-100) by linear interpolation; None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def bootstrap_median_interval(values: Sequence[float], level: float = LEVEL,
                              resamples: int = BOOTSTRAP_RESAMPLES,
                              seed: int = BOOTSTRAP_SEED) -> tuple[float, float] | None:
    """Percentile-bootstrap interval of the median (deterministic: a fixed seed)."""
    if not values:
        return None
    rng = random.Random(seed)
    n = len(values)
    medians = sorted(statistics.median(rng.choices(values, k=n)) for _ in range(resamples))
    tail = (1 - level) / 2
    low = percentile(medians, 100 * tail)
    high = percentile(medians, 100 * (1 - tail))
    assert low is not None and high is not None
    return low, high


def throughput_ratio(pairs: Sequence[tuple[float, float, float, float]], level: float = LEVEL,
                     resamples: int = 2000, seed: int = BOOTSTRAP_SEED
                     ) -> tuple[float, float, float] | None:
    """(ratio, low, high) of two arms' throughputs over paired blocks, each pair (tokens B,
    seconds B, tokens A, seconds A): (sum tokens B / sum seconds B) / (sum tokens A / sum
    seconds A), with a percentile-bootstrap interval over the pairs. Unlike the median of the
    per-pair ratios it weighs every block by its time, so a few blocks of large gains (a
    request that copies its prompt) count as much as they add to the throughput."""
    usable = [p for p in pairs if p[1] > 0 and p[3] > 0 and p[2] > 0]
    if not usable:
        return None

    def ratio(sample: Sequence[tuple[float, float, float, float]]) -> float:
        tb, sb, ta, sa = (sum(p[i] for p in sample) for i in range(4))
        return (tb / sb) / (ta / sa) if ta > 0 else math.inf

    rng = random.Random(seed)
    draws = sorted(ratio(rng.choices(usable, k=len(usable))) for _ in range(resamples))
    tail = (1 - level) / 2
    low, high = percentile(draws, 100 * tail), percentile(draws, 100 * (1 - tail))
    assert low is not None and high is not None
    return ratio(usable), low, high

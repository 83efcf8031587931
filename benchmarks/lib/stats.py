"""Statistics every benchmark shares: percentiles and the percentile-bootstrap interval of a
median (deterministic: a fixed seed), written once in the package's pure core
(`vllm_specdec_plugin/core/paired_stats.py`, also the engine's switchback measurement), and
where two token sequences first differ."""

from __future__ import annotations

from collections.abc import Sequence

from vllm_specdec_plugin.core.paired_stats import (
    BOOTSTRAP_RESAMPLES,
    BOOTSTRAP_SEED,
    LEVEL,
    bootstrap_median_interval,
    percentile,
)

__all__ = ["BOOTSTRAP_RESAMPLES", "BOOTSTRAP_SEED", "LEVEL", "bootstrap_median_interval",
           "first_difference", "percentile"]


def first_difference(a: Sequence[int], b: Sequence[int]) -> int | None:
    """Index of the first differing token (length mismatch counts); None when equal."""
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))

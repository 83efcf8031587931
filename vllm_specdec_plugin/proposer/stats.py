"""The adaptive proposer's statistics file (VLLM_SPECDEC_ADAPTIVE_STATS), written atomically."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any


def per_row_us(stats: Mapping[str, float], mode: str = "") -> float | None:
    """The proposer's own microseconds per batch row per call (all calls, or one mode's)."""
    prefix = f"{mode}_" if mode else ""
    rows = stats.get(f"{prefix}rows", 0.0)
    return 1e6 * stats[f"{prefix}overhead_s"] / rows if rows else None


def write_stats(path: str, stats: Mapping[str, float], state: Mapping[str, Any],
                logger: Any) -> None:
    """The counters, the cost per row (overall, awake, dormant) and the policy's state."""
    document = {**stats,
                "us_per_row": per_row_us(stats),
                "us_per_row_awake": per_row_us(stats, "awake"),
                "us_per_row_dormant": per_row_us(stats, "dormant"),
                **state}
    try:
        tmp = f"{path}.tmp"
        with open(tmp, "w") as out:
            json.dump(document, out)
        os.replace(tmp, path)
    except OSError as exc:
        logger.debug("adaptive proposer stats not written: %s", exc)

"""The adaptive proposer's statistics file (VLLM_SPECDEC_ADAPTIVE_STATS), written atomically."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any


def write_stats(path: str, stats: Mapping[str, float], cost: Any, alpha: Mapping[str, Any],
                suffix: bool, logger: Any) -> None:
    """The counters, the cost per row, the step-cost estimate and the pooled acceptance."""
    document = {**stats,
                "us_per_row": 1e6 * stats["overhead_s"] / max(stats["rows"], 1),
                "cost": None if cost is None else vars(cost),
                "alpha": dict(alpha),
                "suffix": suffix}
    try:
        tmp = f"{path}.tmp"
        with open(tmp, "w") as out:
            json.dump(document, out)
        os.replace(tmp, path)
    except OSError as exc:
        logger.debug("adaptive proposer stats not written: %s", exc)

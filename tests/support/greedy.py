"""Greedy tokens of two engines compared where bfloat16 can tie: `TIE`, `top_two` and
`same_greedy_tokens`, the rule written once in `benchmarks/lib/greedy.py` (the load test's
server answers use it too), re-exported for the engine tests and the engine runner scripts
(`engine_run.py`, `controller_run.py`, each run as a script from `tests/support`: the repo
root, where `benchmarks` is, is added to their path here)."""

from __future__ import annotations

import sys
from pathlib import Path

_REPO = str(Path(__file__).resolve().parents[2])
if _REPO not in sys.path:
    sys.path.append(_REPO)

from benchmarks.lib.greedy import TIE, same_greedy_tokens, top_two  # noqa: E402

__all__ = ["TIE", "same_greedy_tokens", "top_two"]

"""Hypothesis depth: each property test's example count as written is what CI runs (bounded, so
the suite's time stays known); `HYPOTHESIS_PROFILE=deep` multiplies every count by `DEEP` for
a deeper search on demand (after changing a parser, before a release):

    HYPOTHESIS_PROFILE=deep bash scripts/test.sh --fast

The profiles themselves (`ci`, `deep`) are registered in tests/conftest.py.
"""

from __future__ import annotations

import os

DEEP = 10
PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "ci")


def examples(count: int) -> int:
    """`count` in CI, `DEEP` times it under the deep profile."""
    return count * DEEP if PROFILE == "deep" else count

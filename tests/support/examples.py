"""Hypothesis depth: each property test's example count as written is what CI runs (bounded, so
the suite's time stays known); `HYPOTHESIS_PROFILE=deep` multiplies every count by `DEEP` for
a deeper search on demand (after changing a parser, before a release):

    HYPOTHESIS_PROFILE=deep bash scripts/test.sh --fast

The profiles themselves (`ci`, `deep`) are registered in tests/conftest.py.
"""

from __future__ import annotations

import copy
import os

DEEP = 10
PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "ci")


def examples(count: int) -> int:
    """`count` in CI, `DEEP` times it under the deep profile."""
    return count * DEEP if PROFILE == "deep" else count


def fix_draws() -> None:
    """Make a derandomized test draw the same examples in every process.

    Hypothesis (from 6.131; pinned 6.170.17 here) now and then draws a constant found in the
    source of the project's modules that the process has already imported. Its examples then
    depend on what ran before it, and under pytest-xdist each worker runs other files first. A
    derandomized test can then pass in one grouping and fail in another, so "CI sees the same
    examples every run" was false. `test_exploration_stays_within_its_budget_once_learned`
    failed alone and passed in the suite, and so did a credential nested ten URIs deep
    (test_uri_redaction.py).

    The pool of the project's constants is kept empty, so only Hypothesis's own constants
    apply. `tests/unit/test_hypothesis_draws.py` checks this. A Hypothesis without the pool
    is left as it is, and the same test then tells whether it still needs this."""
    from hypothesis.internal.conjecture import providers

    pool = getattr(providers, "_local_constants", None)
    if pool is None or not hasattr(providers, "_get_local_constants"):
        return
    empty = copy.deepcopy(pool)  # same shape (sorted sets, their keys), nothing in it
    for values in vars(empty).values():
        values.clear()
    providers._get_local_constants = lambda: empty

"""A derandomized Hypothesis test draws the same examples whatever the process imported before it
(`support.examples.fix_draws`, installed by tests/conftest.py). Without it, Hypothesis mixes
constants from the project's imported modules into its draws, and a test's examples depend on
which files its pytest-xdist worker ran first."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st


def draws() -> list[int]:
    seen: list[int] = []

    @settings(derandomize=True, max_examples=300, database=None, deadline=None)
    @given(st.integers(0, 10**6))
    def draw(value: int) -> None:
        seen.append(value)

    draw()
    return seen


def test_imports_in_between_do_not_change_the_examples(tmp_path: Path) -> None:
    before = draws()
    # A module of the project's kind (not a test file, not site-packages) full of constants in
    # the strategy's range, imported between two runs of the same test.
    source = tmp_path / "pool_of_constants.py"
    source.write_text("\n".join(f"VALUE_{n} = {100_003 * n + 7}" for n in range(1, 9)) + "\n")
    spec = importlib.util.spec_from_file_location("pool_of_constants", source)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["pool_of_constants"] = module
    try:
        spec.loader.exec_module(module)
        after = draws()
    finally:
        del sys.modules["pool_of_constants"]
    assert after == before

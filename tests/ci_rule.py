"""Fail, never skip, in CI: CI (`.ci/run` exports CI=true) builds every environment and installs
every tool the suite needs, so a test that skips there is a test that silently did not run.

Outside CI a missing venv, tool or optional package skips with the reason. tests/conftest.py
imports the hook below, so it covers every test; `unavailable` gives the reason up front.
"""

from __future__ import annotations

import os
from collections.abc import Generator, Mapping
from typing import NoReturn

import pytest


def in_ci(env: Mapping[str, str] = os.environ) -> bool:
    """CI is set to anything but empty, 0 or false (GitHub, GitLab and `.ci/run` set "true")."""
    return env.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def unavailable(reason: str) -> NoReturn:
    """What this test needs is not installed here: fail in CI (CI installs it), else skip."""
    if in_ci():
        pytest.fail(f"{reason}: CI installs it, so there this test must run", pytrace=False)
    pytest.skip(reason)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Generator:
    """In CI, a skip from any source (a skipif mark, importorskip, pytest.skip) is a failure."""
    outcome = yield
    report = outcome.get_result()
    if report.skipped and in_ci() and not hasattr(report, "wasxfail"):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else report.longrepr
        report.outcome = "failed"
        report.longrepr = (f"skipped in CI ({reason}); CI installs everything the suite needs, "
                           "so a skip there hides a test that did not run")

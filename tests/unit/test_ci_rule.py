"""Fail, never skip, in CI (tests/ci_rule.py): each way a test can skip, run by pytest in a fresh
process with and without CI=true."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from ci_rule import in_ci

TESTS = Path(__file__).parents[1]
REPO = TESTS.parent

SKIPPING = '''
import pytest
from ci_rule import unavailable

def test_skip_call():
    pytest.skip("no frobnicator")

@pytest.mark.skipif(True, reason="no frobnicator")
def test_skipif_mark():
    pass

def test_importorskip():
    pytest.importorskip("no_such_module_anywhere")

def test_unavailable():
    unavailable("no frobnicator")

@pytest.fixture
def needs_it():
    pytest.skip("fixture cannot build it")

def test_fixture_skip(needs_it):
    pass

def test_passes():
    pass

@pytest.mark.xfail(reason="known", strict=True)
def test_xfail():
    assert False
'''


def outcomes(tmp_path: Path, ci: str | None) -> dict[str, str]:
    """Each test's outcome as pytest -v reports it (a failed fixture reads ERROR)."""
    (tmp_path / "skipping_test.py").write_text(SKIPPING)
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "PYTEST_ADDOPTS")}
    env["PYTHONPATH"] = str(TESTS)
    if ci is not None:
        env["CI"] = ci
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "ci_rule", "-p",
                           "no:cacheprovider", "-v", "--rootdir", str(tmp_path),
                           "skipping_test.py"],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    return dict(re.findall(r"^skipping_test\.py::(\w+) ([A-Z]+)", done.stdout, re.M))


EVERY_SKIP = ("test_skip_call", "test_skipif_mark", "test_importorskip", "test_unavailable",
              "test_fixture_skip")


@pytest.mark.parametrize("ci", ["true", "1", "True"])
def test_in_ci_every_skip_fails(tmp_path, ci):
    seen = outcomes(tmp_path, ci)
    assert all(seen.get(name) in ("FAILED", "ERROR") for name in EVERY_SKIP), seen
    assert seen.get("test_passes") == "PASSED" and seen.get("test_xfail") == "XFAIL"


@pytest.mark.parametrize("ci", [None, "", "false", "0"])
def test_outside_ci_they_skip(tmp_path, ci):
    seen = outcomes(tmp_path, ci)
    assert {name: seen.get(name) for name in EVERY_SKIP} == dict.fromkeys(EVERY_SKIP, "SKIPPED")
    assert seen.get("test_passes") == "PASSED"


def test_in_ci_reads_the_variable():
    assert in_ci({"CI": "true"}) and in_ci({"CI": "yes"})
    assert not in_ci({}) and not in_ci({"CI": "false"}) and not in_ci({"CI": ""})


def test_ci_entry_point_sets_ci_itself(tmp_path):
    """`.ci/run` exports CI=true before the test command, whatever the runner set."""
    (tmp_path / ".ci").mkdir()
    (tmp_path / "scripts").mkdir()
    (tmp_path / ".ci" / "run").write_text((REPO / ".ci" / "run").read_text())
    (tmp_path / "scripts" / "test.sh").write_text('echo "CI=$CI"\n')
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    for runner_ci in (None, "", "false"):
        if runner_ci is not None:
            env["CI"] = runner_ci
        done = subprocess.run(["bash", str(tmp_path / ".ci" / "run")], capture_output=True,
                              text=True, env=env, timeout=30, check=True)
        assert done.stdout == "CI=true\n"


def test_the_suite_runs_under_the_rule():
    import ci_rule
    import conftest

    assert conftest.pytest_runtest_makereport is ci_rule.pytest_runtest_makereport

"""Count the vLLM processes each test file starts (for docs/testing.md's table).

With `SPECDEC_COUNT_PROCESSES=FILE` set, every `subprocess.Popen` a test makes whose command
runs vLLM (a `tests/support/*.py` runner or probe, `vllm_entry`/`vllm serve`, the launcher or
the plugin's CLI against a server) is counted against the test's file, and one JSON line per
test file is appended to FILE when the session ends (each xdist worker appends its own lines).
Unset, nothing is patched.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections import Counter
from typing import Any

ENV = "SPECDEC_COUNT_PROCESSES"
MARKERS = ("tests/support/", "vllm_entry", "vllm_specdec_plugin.launcher", "benchmarks")
counts: Counter[str] = Counter()
_original = subprocess.Popen.__init__


def _current_file() -> str:
    current = os.environ.get("PYTEST_CURRENT_TEST", "")
    return current.split("::", 1)[0] or "?"


def _counting_init(self: Any, args: Any, *rest: Any, **kwargs: Any) -> None:
    words = [str(a) for a in args] if isinstance(args, (list, tuple)) else [str(args)]
    if any(marker in word for word in words for marker in MARKERS):
        counts[_current_file()] += 1
    _original(self, args, *rest, **kwargs)


def count_run() -> None:
    """A runner script forked from the engine tests' fork server (no `Popen`)."""
    if os.environ.get(ENV):
        counts[_current_file()] += 1


def install() -> None:
    if os.environ.get(ENV):
        subprocess.Popen.__init__ = _counting_init  # type: ignore[method-assign]


def write() -> None:
    path = os.environ.get(ENV)
    if path and counts:
        with open(path, "a", encoding="utf-8") as out:
            for name, count in sorted(counts.items()):
                out.write(json.dumps({"file": name, "processes": count}) + "\n")

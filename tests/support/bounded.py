"""Run a snippet of Python in a child process under a memory and a time limit.

For the tests of input classes that are about memory or time (alias expansion, endless
bodies, trickling servers): the child gets `RLIMIT_AS` (its whole address space) and a wall
clock limit, so a regression fails the test instead of taking the test runner down.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).parents[2]


@dataclass(frozen=True)
class Bounded:
    returncode: int | None
    """None when the time limit killed the child."""
    stdout: str
    stderr: str
    seconds: float

    @property
    def timed_out(self) -> bool:
        return self.returncode is None

    def __str__(self) -> str:
        return (f"rc={self.returncode} after {self.seconds:.1f} s\nstdout: {self.stdout[-2000:]}"
                f"\nstderr: {self.stderr[-3000:]}")


def run_bounded(code: str, *, memory_mib: int = 512, timeout_s: float = 30,
                env: dict[str, str] | None = None) -> Bounded:
    """`python -c code` with at most `memory_mib` of address space and `timeout_s` seconds."""
    limit = memory_mib << 20

    def set_limits() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    child_env = {**os.environ, **(env or {})}
    child_env["PYTHONPATH"] = os.pathsep.join(
        [str(REPO), str(REPO / "tests"), child_env.get("PYTHONPATH", "")])
    start = time.monotonic()
    try:
        done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                              text=True, timeout=timeout_s, preexec_fn=set_limits,
                              env=child_env, check=False)
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        err = exc.stderr.decode() if isinstance(exc.stderr, bytes) else (exc.stderr or "")
        return Bounded(None, out, err, time.monotonic() - start)
    return Bounded(done.returncode, done.stdout, done.stderr, time.monotonic() - start)

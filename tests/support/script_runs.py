"""Run a `tests/support` runner script as `python script *args` would, forked from a warm server
where that is the same thing.

An in-process engine run spends 13 of its 30-40 s importing torch and vLLM. `run` sends the run
to this pytest process's fork server (`engine_zygote.py`, started on first use), whose child has
those imports already, when the run's environment agrees with the server's on everything the
imports read (`IMPORT_TIME`) and keeps the engine in process; otherwise, and with
`SPECDEC_TEST_FORK=0`, it starts `python script *args` afresh. Either way the caller gets a
`subprocess.CompletedProcess` with the script's stdout, stderr and exit code, and a run that
outlives `timeout` has its whole session killed and raises `subprocess.TimeoutExpired`.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any

from support import engine_layout, process_count

ZYGOTE = Path(__file__).with_name("engine_zygote.py")
SWITCH = "SPECDEC_TEST_FORK"
IMPORT_TIME = ("PATH", "HOME", "LD_", "PYTHON", "TORCH", "OMP_", "KMP_", "MKL_", "NUMBA",
               "TRITON", "CUDA", "HF_", "TRANSFORMERS", "TOKENIZERS", "XDG_", "VLLM_LOGGING",
               "VLLM_CONFIGURE_LOGGING", "VLLM_TARGET_DEVICE", "VLLM_PLUGINS", "VLLM_USE_")
"""Prefixes of the variables torch's and vLLM's imports (and the platform vLLM resolves while
importing) read: a run goes to the server only where these equal the server's."""
START_TIMEOUT_S = 180


def kill_session(pid: int) -> None:
    """Kill what is left of the session `pid` leads (vLLM engine-core and worker processes)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


def _import_view(env: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k.startswith(IMPORT_TIME)}


class _Zygote:
    def __init__(self, env: Mapping[str, str]) -> None:
        self.env = dict(env)
        self.proc = subprocess.Popen([sys.executable, str(ZYGOTE)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                     text=True, env=self.env, start_new_session=True)
        assert self.proc.stdout is not None and self.proc.stdin is not None
        self._in: IO[str] = self.proc.stdin
        self._out: IO[str] = self.proc.stdout
        self._read(START_TIMEOUT_S)  # {"ready": pid}

    def _read(self, timeout: float) -> dict[str, Any]:
        ready, _, _ = select.select([self._out], [], [], timeout)
        if not ready:
            raise TimeoutError
        line = self._out.readline()
        if not line:
            raise RuntimeError("the fork server exited")
        answer: dict[str, Any] = json.loads(line)
        return answer

    def run(self, script: Path, args: Sequence[str], env: Mapping[str, str],
            timeout: float) -> subprocess.CompletedProcess[str]:
        with tempfile.TemporaryDirectory(prefix="script-run-") as tmp:
            out, err = Path(tmp, "stdout"), Path(tmp, "stderr")
            request = {"script": str(script), "args": list(args), "env": dict(env),
                       "cwd": os.getcwd(), "stdout": str(out), "stderr": str(err)}
            self._in.write(json.dumps(request) + "\n")
            self._in.flush()
            pid = self._read(30)["pid"]
            try:
                rc = self._read(timeout)["rc"]
            except TimeoutError:
                kill_session(pid)
                self._read(60)  # the server reaps it and says so: the protocol stays in step
                raise subprocess.TimeoutExpired([str(script), *args], timeout,
                                                out.read_text(errors="replace"),
                                                err.read_text(errors="replace")) from None
            finally:  # what the child left behind in its session (vLLM helpers)
                kill_session(pid)
            return subprocess.CompletedProcess([str(script), *args], rc,
                                               out.read_text(errors="replace"),
                                               err.read_text(errors="replace"))

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._in.close()
        kill_session(self.proc.pid)
        self.proc.wait()


_zygote: _Zygote | None = None
_broken = False


def _server(env: Mapping[str, str]) -> _Zygote | None:
    """This process's fork server when `env` may run there, else None."""
    global _zygote, _broken
    if _broken or os.environ.get(SWITCH) == "0":
        return None
    if env.get("VLLM_ENABLE_V1_MULTIPROCESSING") != engine_layout.IN_PROCESS[
            "VLLM_ENABLE_V1_MULTIPROCESSING"]:
        return None  # the production layout: vLLM forks and spawns from its own start
    if _zygote is None:
        try:
            _zygote = _Zygote(env)
        except (OSError, TimeoutError, RuntimeError, ValueError):
            _broken = True
            return None
        atexit.register(_zygote.close)
    return _zygote if _import_view(env) == _import_view(_zygote.env) else None


def run(script: Path, args: Sequence[str], env: Mapping[str, str],
        timeout: float) -> subprocess.CompletedProcess[str]:
    """`python script *args` with `env`: forked from the warm server where that is the same
    (see the module docstring), else a fresh process; its session is killed when it ends."""
    server = _server(env)
    if server is not None:
        process_count.count_run()
        return server.run(script, args, env, timeout)
    with subprocess.Popen([sys.executable, str(script), *args], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, env=dict(env),
                          start_new_session=True) as proc:
        try:
            stdout, stderr = proc.communicate(timeout=timeout)
        finally:
            kill_session(proc.pid)
    return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)

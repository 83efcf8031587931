"""Run a `tests/support` runner script (or a module, as `-m`) as `python script *args` would,
forked from a warm server where that is the same thing.

An in-process engine run spends 13 of its 30-40 s importing torch and vLLM, a contract probe in
a sibling environment (.venv-rbln, .venv-vllm033) 7-10 of its 15, and a `vllm-specdec explain`
5 of its 6 (vLLM's argument parser). `run` sends the run to a fork server
(`engine_zygote.py`, started on first use: one per interpreter, prelude and import-time
environment in this pytest process, at most `MAX_SERVERS`), whose child has those imports
already, when the run's environment agrees with the server's on everything the imports read
(`IMPORT_TIME`) and, for a run that starts an engine, keeps the engine in process; otherwise,
and with `SPECDEC_TEST_FORK=0`, it starts `python script *args` afresh. Either way the caller
gets a `subprocess.CompletedProcess` with the script's stdout, stderr and exit code, and a run
that outlives `timeout` has its whole session killed and raises `subprocess.TimeoutExpired`.
A server that falls out of step (no answer in time, a line that is not the protocol's, its pipe
closed) is closed and forgotten: the next run starts a fresh one, and a run whose end the lost
server did not report is made once more in a fresh process.
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
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any

from support import engine_layout, process_count

ZYGOTE = Path(__file__).with_name("engine_zygote.py")
SWITCH = "SPECDEC_TEST_FORK"
IMPORT_TIME = ("PATH", "HOME", "LD_", "PYTHON", "TORCH", "OMP_", "KMP_", "MKL_", "NUMBA",
               "TRITON", "CUDA", "HF_", "TRANSFORMERS", "TOKENIZERS", "XDG_", "VLLM_LOGGING",
               "VLLM_CONFIGURE_LOGGING", "VLLM_TARGET_DEVICE", "VLLM_PLUGINS", "VLLM_USE_",
               "RBLN_", "VLLM_RBLN", "_VLLM_RBLN")
"""Prefixes of the variables torch's, vLLM's and vllm-rbln's imports (and the platform vLLM
resolves while importing) read: a run goes to a server only where these equal the server's.
vllm-rbln reads `_VLLM_RBLN_RESOLVED_MODEL_IMPL` at import (`vllm_rbln/envs.py`)."""
ENGINE_PRELUDE = ("torch", "vllm.entrypoints.llm")
"""What the engine runner scripts import before their engine starts (`from vllm import LLM`)."""
CONTRACT_PRELUDE = ("torch", "vllm", "torch._dynamo", "torch._inductor", "functorch.compile",
                    "transformers", "openai.types.responses", "triton", "fastapi", "aiohttp")
"""What a contract probe's server imports: vLLM's package (15 light modules, which resolve no
platform on vLLM 0.32/0.33: a probe stands in CUDA, or picks the CPU platform, after the fork;
on vLLM 0.30 with vllm-rbln installed it resolves RblnPlatform, from the import-time environment
the key holds), then the third-party modules vLLM imports later (5 s of a probe's 10 s here),
none of which is a module the plugin changes; `vllm` first, as vLLM's `env_override` sets
torch's compile variables before torch's compiler imports. A module not installed is left out."""
MAX_SERVERS = 4
"""Servers kept per pytest process (each holds torch and vLLM: ~1 GB); the least recently
used one is closed for a fifth."""
START_TIMEOUT_S = 180
PID_TIMEOUT_S = 30.0
"""How long the server may take to fork a child and say its pid; past it the server is lost."""
REAP_TIMEOUT_S = 60.0
"""How long the server may take to say a killed child is gone; past it the server is lost."""


class ServerLost(Exception):
    """The fork server fell out of step before it said how a run ended."""


def kill_session(pid: int) -> None:
    """Kill what is left of the session `pid` leads (vLLM engine-core and worker processes)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


def _import_view(env: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k.startswith(IMPORT_TIME)}


class _Zygote:
    def __init__(self, python: str, prelude: Sequence[str], env: Mapping[str, str]) -> None:
        self.env = dict(env)
        self.proc = subprocess.Popen([python, str(ZYGOTE), *prelude], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                     env=self.env, start_new_session=True)
        assert self.proc.stdout is not None and self.proc.stdin is not None
        self._in: IO[bytes] = self.proc.stdin
        self._out = self.proc.stdout.fileno()
        self._pending = b""  # read from the pipe, not yet answered: `select` cannot see it
        self.lost = False
        self._read(START_TIMEOUT_S)  # {"ready": pid}

    def _read(self, timeout: float) -> dict[str, Any]:
        """The server's next line. Read from the raw pipe into `_pending`: two answers that
        arrive together (a quick child's pid and exit code, while this process was starved)
        must not leave the second in a file object's buffer, which `select` does not see: in CI
        that timed out a run and left every later run of its server one answer behind."""
        deadline = time.monotonic() + timeout
        while b"\n" not in self._pending:
            ready, _, _ = select.select([self._out], [], [], max(deadline - time.monotonic(), 0))
            if not ready:
                raise TimeoutError
            chunk = os.read(self._out, 1 << 16)
            if not chunk:
                raise RuntimeError("the fork server exited")
            self._pending += chunk
        line, _, self._pending = self._pending.partition(b"\n")
        answer: dict[str, Any] = json.loads(line)
        return answer

    def _answer(self, key: str, timeout: float, *, deadline: bool = False) -> int | None:
        """The server's next answer, `{key: N}`. No answer in `timeout` is None where that is
        the run's own `deadline`; anything else that is not the answer loses the server."""
        try:
            value = self._read(timeout)[key]
            if isinstance(value, int):
                return value
        except TimeoutError:
            if deadline:
                return None
        except (RuntimeError, ValueError, LookupError, TypeError, OSError):
            pass
        self.lost = True
        raise ServerLost(f"no {key!r} answer in step")

    def run(self, target: dict[str, str], argv: list[str], env: Mapping[str, str],
            timeout: float, retry: bool = True) -> subprocess.CompletedProcess[str]:
        """Run `target` ({"script": path} or {"module": name}) with `argv[1:]`. A child that
        timed out before its own set-up (its stdout file never made: stuck between the fork and
        its `setsid`, where killing its session cannot reach it) is killed by its pid and run
        once more. `ServerLost` where the server fell out of step before it said how the run
        ended (it is then `lost`, as it is where it lost step while reaping a timed-out run)."""
        with tempfile.TemporaryDirectory(prefix="script-run-") as tmp:
            out, err = Path(tmp, "stdout"), Path(tmp, "stderr")
            request = {**target, "args": argv[1:], "env": dict(env),
                       "cwd": os.getcwd(), "stdout": str(out), "stderr": str(err)}
            try:
                self._in.write(json.dumps(request).encode() + b"\n")
                self._in.flush()
            except OSError:
                self.lost = True
                raise ServerLost("its pipe is closed") from None
            pid = self._answer("pid", PID_TIMEOUT_S)
            assert pid is not None
            try:
                rc = self._answer("rc", timeout, deadline=True)
                if rc is None:  # past the deadline
                    kill_session(pid)
                    stalled = not out.exists()
                    if stalled:
                        with contextlib.suppress(ProcessLookupError, PermissionError):
                            os.kill(pid, signal.SIGKILL)
                    try:
                        self._answer("rc", REAP_TIMEOUT_S)  # reaped: the server stays in step
                    except ServerLost:
                        if stalled:
                            raise  # it never started: the caller makes it afresh
                        stalled = False
                    if stalled and retry:
                        return self.run(target, argv, env, timeout, retry=False)
                    raise subprocess.TimeoutExpired(argv, timeout, _text(out), _text(err))
            finally:  # what the child left behind in its session (vLLM helpers)
                kill_session(pid)
            return subprocess.CompletedProcess(argv, rc,
                                               out.read_text(errors="replace"),
                                               err.read_text(errors="replace"))

    def close(self) -> None:
        """Stop the server, and a child it said it forked and did not see end."""
        with contextlib.suppress(OSError):
            self._in.close()
        kill_session(self.proc.pid)
        self.proc.wait()
        with contextlib.suppress(OSError):  # what it wrote before it stopped, not yet read
            while select.select([self._out], [], [], 0)[0] and (chunk := os.read(self._out,
                                                                                 1 << 16)):
                self._pending += chunk
        for line in self._pending.splitlines():
            with contextlib.suppress(ValueError, AttributeError):
                pid = json.loads(line).get("pid")
                if isinstance(pid, int):
                    kill_session(pid)
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.kill(pid, signal.SIGKILL)


def _text(path: Path) -> str:
    return path.read_text(errors="replace") if path.exists() else ""


_servers: dict[tuple[str, tuple[str, ...], tuple[tuple[str, str], ...]], _Zygote] = {}
_broken: set[str] = set()  # interpreters whose server could not start: fresh processes there


def _server(python: str, prelude: Sequence[str], env: Mapping[str, str],
            starts_engine: bool) -> _Zygote | None:
    """The server for `env` on `python` with `prelude` imported, started on first use; None
    where the run must have a fresh process."""
    if python in _broken or os.environ.get(SWITCH) == "0":
        return None
    if starts_engine and env.get("VLLM_ENABLE_V1_MULTIPROCESSING") != engine_layout.IN_PROCESS[
            "VLLM_ENABLE_V1_MULTIPROCESSING"]:
        return None  # the production layout: vLLM forks and spawns from its own start
    key = (python, tuple(prelude), tuple(sorted(_import_view(env).items())))
    server = _servers.pop(key, None)
    if server is None:
        if len(_servers) >= MAX_SERVERS:
            _servers.pop(next(iter(_servers))).close()
        try:
            server = _Zygote(python, prelude, env)
        except (OSError, TimeoutError, RuntimeError, ValueError):
            _broken.add(python)
            return None
    _servers[key] = server  # last in the dict: the most recently used
    return server


def _forget(server: _Zygote) -> None:
    for key in [key for key, known in _servers.items() if known is server]:
        del _servers[key]
    server.close()


@atexit.register
def _close_servers() -> None:
    while _servers:
        _servers.popitem()[1].close()


def _run(target: dict[str, str], argv: list[str], env: Mapping[str, str], timeout: float,
         python: str | None, prelude: Sequence[str],
         starts_engine: bool) -> subprocess.CompletedProcess[str]:
    python = python or sys.executable
    server = _server(python, prelude, env, starts_engine)
    if server is not None:
        process_count.count_run()
        try:
            return server.run(target, argv, env, timeout)
        except ServerLost:
            pass  # how the run ended is unknown: it is made again below, in a fresh process
        finally:
            if server.lost:
                _forget(server)
    command = [python, target["script"]] if "script" in target else [python, "-m",
                                                                       target["module"]]
    with subprocess.Popen([*command, *argv[1:]], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, env=dict(env),
                          start_new_session=True) as proc:
        try:
            stdout, stderr = proc.communicate(timeout=timeout)
        finally:
            kill_session(proc.pid)
    return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)


def run(script: Path, args: Sequence[str], env: Mapping[str, str], timeout: float, *,
        python: str | None = None, prelude: Sequence[str] = ENGINE_PRELUDE,
        starts_engine: bool = True) -> subprocess.CompletedProcess[str]:
    """`python script *args` with `env` (`python`: this interpreter by default): forked from a
    warm server where that is the same (see the module docstring), else a fresh process; its
    session is killed when it ends. `starts_engine=False` for a script that starts no engine
    (a contract probe): the engine layout does not matter to it."""
    return _run({"script": str(script)}, [str(script), *args], env, timeout, python, prelude,
                starts_engine)


def run_module(module: str, args: Sequence[str], env: Mapping[str, str], timeout: float, *,
               prelude: Sequence[str] = ENGINE_PRELUDE) -> subprocess.CompletedProcess[str]:
    """`python -m module *args` with `env`, as `run` runs a script; for a command that starts
    no engine (e.g. `vllm_specdec_plugin.cli explain`)."""
    return _run({"module": module}, [module, *args], env, timeout, None, prelude, False)

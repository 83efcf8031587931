"""The harness's side of the paired benchmark's engines: one process per configuration.

`Engine` starts `python -m benchmarks.paired.engine SPEC.json` (`paired/engine.py`) in a fresh
process group with a clean env (`engine_env`), placed like the other engine (`placement`), sends
it bursts on stdin and reads its answers from a pipe of its own; `HostMeter` measures the CPU
that processes other than the benchmark's used during a pair.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.paired.configs import Configuration
from vllm_specdec_plugin.core import settings

REPO = Path(__file__).resolve().parents[2]
# Inputs the plugin reads: never inherited from the caller's shell.
PLUGIN_ENV = (*settings.PLUGIN_ENV, "VLLM_PLUGINS")


def engine_env(config: Configuration) -> dict[str, str]:
    """A clean, offline env for one engine, plus the configuration's own variables."""
    env = {k: v for k, v in os.environ.items() if k not in PLUGIN_ENV}
    env.update({"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1",
                "DO_NOT_TRACK": "1", "PYTHONUNBUFFERED": "1", "KAITO_ANNOTATIONS_FILE": "",
                "TOKENIZERS_PARALLELISM": "false"})
    path = [str(REPO), *filter(None, env.get("PYTHONPATH", "").split(os.pathsep))]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(path))  # custom_class from benchmarks/
    iomp = Path(sys.prefix) / "lib" / "libiomp5.so"
    if iomp.exists():  # as the launcher does on CPU hosts: vLLM's CPU spec decoding needs it
        env.setdefault("LD_PRELOAD", str(iomp))
    env.update(config.env)
    return env


def placement(cpus: list[int]) -> tuple[str, set[int]] | None:
    """(VLLM_CPU_OMP_THREADS_BIND for the worker, cores for the frontend and scheduler), the
    same for both engines; None on a single core.

    vLLM's automatic binding puts each engine's worker on core 0 and leaves the scheduler and
    the frontend to the kernel, which places them per process: measured on 2 cores, one engine
    of an A/A pair then ran 16-23% slower than the other for the whole run, a different one
    each run. Pinned alike, the engines differ only in their configuration.
    """
    if len(cpus) < 2:
        return None
    workers = ",".join(str(c) for c in cpus[:-1])
    return workers, {cpus[-1]}


def process_cpu_seconds(pids: Sequence[int]) -> float:
    """User + system CPU time used so far by these processes (gone ones count 0)."""
    import psutil

    total = 0.0
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            times = psutil.Process(pid).cpu_times()
            total += times.user + times.system
    return total


class Engine:
    """One configuration's engine process: bursts in, raw records out (a pipe of its own)."""

    def __init__(self, label: str, config: Configuration, spec: dict[str, Any], work: Path,
                 timeout: float, pin: tuple[str, set[int]] | None = None,
                 trace_dir: Path | None = None) -> None:
        self.label, self.config, self.timeout = label, config, timeout
        spec_path = work / f"{label}.spec.json"
        spec_path.write_text(json.dumps(spec))
        self.log = work / f"{label}.log"
        read_fd, write_fd = os.pipe()
        env = {**engine_env(config), "BENCH_RESULT_FD": str(write_fd)}
        self.adaptive_stats = work / f"{label}.adaptive.json"
        env[settings.ENV_ADAPTIVE_STATS] = str(self.adaptive_stats)
        if trace_dir is not None:
            trace_dir.mkdir(parents=True, exist_ok=True)
            env[settings.ENV_ADAPTIVE_TRACE] = str(trace_dir / f"{label}.trace.jsonl")
        if pin is not None:
            env["VLLM_CPU_OMP_THREADS_BIND"] = pin[0]
        front = None if pin is None else pin[1]
        with self.log.open("w") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "benchmarks.paired.engine", str(spec_path)], cwd=REPO,
                env=env, stdin=subprocess.PIPE, stdout=out, stderr=subprocess.STDOUT, text=True,
                pass_fds=(write_fd,), start_new_session=True,
                preexec_fn=None if front is None else lambda: os.sched_setaffinity(0, front))
        os.close(write_fd)
        self.results = os.fdopen(read_fd)
        self.ready: dict[str, Any] | None = None

    def answer(self) -> dict[str, Any]:
        """The next JSON line from the engine (raises if it died or timed out)."""
        deadline = time.monotonic() + self.timeout
        while True:
            left = deadline - time.monotonic()
            readable, _, _ = select.select([self.results], [], [], max(0.0, min(left, 5.0)))
            line = self.results.readline() if readable else None
            if line:
                answer: dict[str, Any] = json.loads(line)
                return answer
            if line == "" or self.proc.poll() is not None or left <= 0:  # closed, dead, late
                tail = "\n".join(self.log.read_text(errors="replace").splitlines()[-60:])
                raise RuntimeError(f"engine {self.label!r} gave no answer "
                                   f"(rc={self.proc.poll()}):\n{tail}")

    def burst(self, cell: dict[str, Any], max_tokens: int) -> dict[str, Any]:
        assert self.proc.stdin is not None
        cpu = self.cpu_seconds()
        self.proc.stdin.write(json.dumps({"op": "burst", "cell": cell,
                                          "max_tokens": max_tokens}) + "\n")
        self.proc.stdin.flush()
        answer = self.answer()
        answer["cpu_s"] = self.cpu_seconds() - cpu
        return answer

    def cpu_seconds(self) -> float:
        """CPU time (user + system) used so far by this engine's processes."""
        return process_cpu_seconds(self.pids())

    def pids(self) -> list[int]:
        import psutil

        try:
            root = psutil.Process(self.proc.pid)
            return [root.pid, *(c.pid for c in root.children(recursive=True))]
        except psutil.NoSuchProcess:
            return []

    def stop(self) -> None:
        with contextlib.suppress(BrokenPipeError, OSError, ValueError):
            assert self.proc.stdin is not None
            self.proc.stdin.write(json.dumps({"op": "stop"}) + "\n")
            self.proc.stdin.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=60)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)  # vLLM's workers outliving their parent
        self.proc.wait()
        self.results.close()


class HostMeter:
    """CPU time used on the host, and by our own processes, between two readings."""

    def __init__(self, engines: list[Engine]) -> None:
        import psutil

        self.psutil = psutil
        self.pids = sorted({os.getpid(), *(pid for e in engines for pid in e.pids())})

    def _read(self) -> tuple[float, float, float]:
        times = self.psutil.cpu_times()
        busy = sum(times) - times.idle - getattr(times, "iowait", 0.0)
        return time.monotonic(), busy, process_cpu_seconds(self.pids)

    def start(self) -> tuple[float, float, float]:
        return self._read()

    def foreign_share(self, start: tuple[float, float, float]) -> float:
        """CPU used by other processes since `start`, as a share of all cores' time."""
        end = self._read()
        wall = end[0] - start[0]
        foreign = (end[1] - start[1]) - (end[2] - start[2])
        return max(0.0, foreign) / (wall * (os.cpu_count() or 1)) if wall > 0 else 0.0

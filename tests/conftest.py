"""Shared fixtures: tiny checkpoints built once per session, and real-engine runners."""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings as hypothesis_settings

TESTS = Path(__file__).parent
sys.path.insert(0, str(TESTS))

from ci_rule import in_ci, pytest_runtest_makereport, unavailable  # noqa: E402, F401
from support import engine_layout, examples, process_count, script_runs  # noqa: E402
from support.checkpoints import NGRAM_PROMPTS, build_tiny_llama  # noqa: E402

from vllm_specdec_plugin.assembly import capabilities_for  # noqa: E402
from vllm_specdec_plugin.core import settings  # noqa: E402
from vllm_specdec_plugin.core.types import PlatformCapabilities  # noqa: E402
from vllm_specdec_plugin.inputs.vllm_metrics import iter_metrics, metric_sum  # noqa: E402
from vllm_specdec_plugin.platforms.rbln import RBLN_METHODS  # noqa: E402

ENGINE_TIMEOUT_S = 420
# Env that could leak an opt-in or inputs from the developer's shell into a test.
PLUGIN_ENV = (*settings.PLUGIN_ENV, "VLLM_PLUGINS")


process_count.install()  # SPECDEC_COUNT_PROCESSES=FILE: vLLM processes per test file
engine_layout.bind_this_worker()  # one core per pytest-xdist worker
# Hypothesis: "ci" (the default: each test's own bounded count) or "deep"
# (tests/support/examples.py)
hypothesis_settings.register_profile("ci", print_blob=True)
hypothesis_settings.register_profile("deep", print_blob=True, deadline=None)
hypothesis_settings.load_profile(examples.PROFILE)
examples.fix_draws()  # the same examples in every worker, whatever it imported before


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The files that run vLLM (an `engine` or `contract` test in them) first, in their order:
    pytest-xdist hands out whole files in this order (`--dist loadfile`), so the long ones
    start early and the short unit files fill the end on both workers instead of one worker
    finishing a long file alone."""
    slow = {item.path for item in items
            if item.get_closest_marker("engine") or item.get_closest_marker("contract")}
    items.sort(key=lambda item: item.path not in slow)  # stable: each file keeps its order


def pytest_sessionfinish(session: pytest.Session) -> None:
    process_count.write()


def clean_env(extra: Mapping[str, str] | None = None, tmp: Path | None = None,
              production_layout: bool = False) -> dict[str, str]:
    """A process env with no plugin inputs, offline, pointing default files at `tmp`; an
    offline engine runs in process unless `production_layout` (tests/support/engine_layout.py;
    `vllm serve` always runs its engine core in a process of its own)."""
    env = {k: v for k, v in os.environ.items() if k not in PLUGIN_ENV}
    env.update({"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1",
                "DO_NOT_TRACK": "1", "PYTHONUNBUFFERED": "1", "VLLM_LOGGING_LEVEL": "INFO"})
    if production_layout:
        env.pop("VLLM_ENABLE_V1_MULTIPROCESSING", None)
    else:
        env.update(engine_layout.IN_PROCESS)
    if tmp is not None:  # keep the real default paths out of the tests
        env["KAITO_ANNOTATIONS_FILE"] = ""
    env.update(extra or {})
    return env


@pytest.fixture(scope="session")
def tiny_llama(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_llama(tmp_path_factory.mktemp("tiny-llama"))


@pytest.fixture(scope="session")
def prompts() -> list[str]:
    return list(NGRAM_PROMPTS)


def release_caps(platform: str, version: str, methods: set[str], async_methods: set[str],
                 **fields: Any) -> PlatformCapabilities:
    """`platform`'s capabilities as computed for the installed vLLM, with another release's
    method sets put in by `dataclasses.replace` (vllm-rbln's list and synchronous scheduling on
    RBLN); the schedule and Model Runner V2 fields are off unless given."""
    caps = capabilities_for(platform)
    rbln = platform == "rbln"
    return replace(caps, vllm_version=version,
                   methods=frozenset(methods) & RBLN_METHODS if rbln else frozenset(methods),
                   async_methods=frozenset() if rbln else frozenset(async_methods),
                   batch_schedule=False, v2_methods=frozenset(), static_schedule={},
                   **fields)


def patch_probe(case: str) -> dict:
    """tests/support/patch_probe.py CASE in a process of its own (the plugin's vLLM fixes in a
    given order), forked after torch and vLLM's package (`script_runs.CONTRACT_PRELUDE`: neither
    a platform nor a kernel registered, so each order starts from nothing)."""
    done = script_runs.run(TESTS / "support" / "patch_probe.py", [case], clean_env(), 300,
                           prelude=script_runs.CONTRACT_PRELUDE, starts_engine=False)
    lines = [line[6:] for line in done.stdout.splitlines() if line.startswith("PROBE ")]
    assert lines, f"probe {case} printed nothing:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return json.loads(lines[-1])


@pytest.fixture(scope="session")
def registration_first() -> dict:
    """The bugs the installed vLLM ships ("shipped"), and the fixes applied after its CPU kernels
    were registered."""
    # find_spec, not an import: `vllm._C` is the AVX-512 build, which kills the process with
    # SIGILL on an AVX2-only CPU (vLLM's CPU platform imports the matching `_C_AVX2` itself).
    if importlib.util.find_spec("vllm._C") is None:
        unavailable("vLLM's compiled CPU ops (vllm._C) are not installed")
    return patch_probe("registration-first")


def run_engine(llm: Mapping[str, Any], prompts: list[str], env: Mapping[str, str],
               max_tokens: int = 48, config_only: bool = False,
               sampling: list[Mapping[str, Any]] | None = None,
               one_at_a_time: bool = False, continue_tokens: int = 0,
               logprobs: int | None = None) -> dict[str, Any]:
    """Start a real vLLM engine in a process of its own (`support/script_runs.py`: forked from a
    warm server where that is the same), generate greedily, report what it did.

    With `config_only`, only vLLM's config resolution runs (no weights loaded). The result has
    the engine's combined output under "log" (vLLM logs to stdout).
    """
    spec = json.dumps({"llm": dict(llm), "prompts": prompts, "max_tokens": max_tokens,
                       "config_only": config_only, "sampling": sampling,
                       "one_at_a_time": one_at_a_time, "continue_tokens": continue_tokens,
                       "logprobs": logprobs})
    done = script_runs.run(TESTS / "support" / "engine_run.py", [spec], env, ENGINE_TIMEOUT_S)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        raise AssertionError(f"engine run failed (rc={done.returncode}):\n"
                             f"{done.stdout[-3000:]}\n{done.stderr[-6000:]}")
    result = json.loads(lines[-1])
    result["log"] = "\n".join(line for line in (done.stdout + done.stderr).splitlines()
                              if not line.startswith("{"))
    return result


def kill_group(proc: subprocess.Popen) -> None:
    """Kill what is left of a process's session (vLLM engine-core and worker processes)."""
    script_runs.kill_session(proc.pid)


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def http(method: str, url: str, body: Mapping[str, Any] | None = None,
         timeout: float = 120) -> tuple[int, str]:
    """A loopback HTTP call: (status, body text)."""
    import urllib.error
    import urllib.request

    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def wait_healthy(proc: subprocess.Popen, port: int, log: Path, timeout: float = 420) -> None:
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"server exited rc={proc.returncode}:\n{log.read_text()[-6000:]}")
        try:
            if http("GET", f"http://127.0.0.1:{port}/health", timeout=5)[0] == 200:
                return
        except OSError:
            pass
        time.sleep(2)
    proc.kill()
    raise AssertionError(f"server not healthy in {timeout}s:\n{log.read_text()[-6000:]}")


def metric(text: str, name: str) -> float:
    """Sum of a Prometheus metric's samples (all label sets), read by the plugin's one reader."""
    return metric_sum(iter_metrics(text), name)


class PluginLog(logging.Handler):
    """Collects the plugin logger's records directly (vLLM's loggers do not propagate)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def at(self, level: int) -> list[str]:
        return [r.getMessage() for r in self.records if r.levelno == level]


@pytest.fixture
def plugin_log():
    """Every record of the `vllm.specdec_plugin` logger during the test, DEBUG and up."""
    handler, logger = PluginLog(), logging.getLogger("vllm.specdec_plugin")
    old_level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    yield handler
    logger.removeHandler(handler)
    logger.setLevel(old_level)


def sibling_venv_python(env_var: str, name: str) -> Path:
    """The python of a test venv beside .venv (`.venv-rbln`, `.venv-vllm033`), or of `$env_var`."""
    return Path(os.environ.get(env_var, TESTS.parent / name)) / "bin" / "python"


def needs_venv(python: Path, setup_script: str) -> pytest.MarkDecorator:
    """Skip outside CI when that venv was not built; CI always builds it, so there it fails."""
    return pytest.mark.skipif(not python.exists() and not in_ci(),
                              reason=f"no {python}: run {setup_script} (CI always does)")

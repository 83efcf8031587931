"""`--version` on both commands prints the installed package's version."""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys

import pytest

import vllm_specdec_plugin

VERSION = importlib.metadata.version("vllm-specdec-plugin")


def test_package_version_matches_its_metadata():
    assert vllm_specdec_plugin.__version__ == VERSION


@pytest.mark.parametrize(("module", "name"), [("vllm_specdec_plugin.cli", "vllm-specdec"),
                                              ("vllm_specdec_plugin.launcher",
                                               "vllm-specdec-launch")])
def test_version_flag(module, name):
    done = subprocess.run([sys.executable, "-m", module, "--version"], capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"{name} {VERSION}"

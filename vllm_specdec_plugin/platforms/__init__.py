"""The platforms, one module each, and host detection across them (RBLN, then NVIDIA, else CPU).

Every probe goes through `root` (the filesystem root) and the given PATH and env, so tests can
build device trees and put small stand-in tools on PATH. A new platform is one module with a
`Platform` subclass and one entry in `_REGISTRY`.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from vllm_specdec_plugin.core.errors import SpecDecodeConfigError, quote_value
from vllm_specdec_plugin.platforms.base import Host, LaunchDefaults, Platform
from vllm_specdec_plugin.platforms.cpu import CpuPlatform
from vllm_specdec_plugin.platforms.cuda import CudaPlatform, RocmPlatform
from vllm_specdec_plugin.platforms.rbln import RblnPlatform

_REGISTRY: dict[str, Platform] = {p.name: p for p in (
    RblnPlatform(), CudaPlatform(), CpuPlatform(), RocmPlatform())}
PLATFORMS = ("rbln", "cuda", "cpu")
"""The platforms the launcher detects and serves, in detection order."""

__all__ = ["PLATFORMS", "Host", "LaunchDefaults", "Platform", "detect_host", "get_platform"]


def get_platform(name: str) -> Platform:
    """The module's policy for vLLM platform `name` (another device type: the defaults)."""
    found = _REGISTRY.get(name)
    if found is not None:
        return found
    generic = Platform()
    generic.name = name
    return generic


def detect_host(
    root: Path | str = "/",
    environ: Mapping[str, str] | None = None,
    path_env: str | None = None,
    platform: str | None = None,
    vllm_build: str | None = None,
) -> Host:
    """The host kind: `platform` when given, else RBLN, then NVIDIA, else CPU.

    `vllm_build` is the installed vLLM's build ("cpu" for a CPU build, None otherwise): a CPU
    build of vLLM serves on the CPU even where NVIDIA GPUs are present.
    """
    import os

    root = Path(root)
    environ = os.environ if environ is None else environ
    if path_env is None:
        path_env = environ.get("PATH", os.defpath)
    if platform is not None and platform not in PLATFORMS:
        raise SpecDecodeConfigError(
            f"platform {quote_value(platform)} is unknown; use one of {', '.join(PLATFORMS)}"
        )
    if platform in (None, "rbln"):
        host = _REGISTRY["rbln"].detect(root, environ, path_env)
        if host or platform == "rbln":
            return host or Host("rbln", evidence=("--platform rbln",))
    if platform in (None, "cuda"):
        host = _REGISTRY["cuda"].detect(root, environ, path_env)
        if host and platform is None and vllm_build == "cpu":
            return Host("cpu", evidence=(*host.evidence, "the installed vLLM is a CPU build"),
                        notes=(f"NVIDIA GPUs found ({'; '.join(host.evidence)}), but the "
                               "installed vLLM is a CPU build, which cannot use them: serving "
                               "on the CPU; install vLLM's CUDA build (pip install vllm) to "
                               "serve on the GPUs",))
        if host or platform == "cuda":
            return host or Host("cuda", evidence=("--platform cuda",))
    return Host("cpu", evidence=("no RBLN NPU or NVIDIA GPU found",)
                if platform is None else ("--platform cpu",))

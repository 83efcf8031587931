"""The platforms, one module each, and the rule that resolves the host among their detectors.

Each platform owns its detection and its edge cases (`Platform.detect`, `Platform.declines`), as
each of vLLM's `*_platform_plugin()` detectors does; `detect_host` applies one fixed rule over
them in `DETECTION_ORDER`. Every probe goes through `HostFacts` (the filesystem root, PATH, env),
so tests can build device trees and put small stand-in tools on PATH. A new platform is one
module with a `Platform` subclass and one entry here: in `DETECTION_ORDER` if the launcher
detects and serves it, else in `_OTHERS` (known to the capabilities only).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from vllm_specdec_plugin.core.errors import SpecDecodeConfigError, quote_value
from vllm_specdec_plugin.platforms.base import Host, HostFacts, LaunchDefaults, Platform
from vllm_specdec_plugin.platforms.cpu import CpuPlatform
from vllm_specdec_plugin.platforms.cuda import CudaPlatform, RocmPlatform
from vllm_specdec_plugin.platforms.rbln import RblnPlatform

DETECTION_ORDER: tuple[Platform, ...] = (RblnPlatform(), CudaPlatform())
"""The detectors, in the order `detect_host` asks them: an RBLN host with NVIDIA GPUs is RBLN's
(vLLM instead refuses two built-in platforms at once; the launcher serves one)."""
FALLBACK: Platform = CpuPlatform()
"""Where the host is served when no detector claims it or the claiming one declines."""
_OTHERS: tuple[Platform, ...] = (RocmPlatform(),)
_REGISTRY: dict[str, Platform] = {p.name: p for p in (*DETECTION_ORDER, FALLBACK, *_OTHERS)}
PLATFORMS = (*(p.name for p in DETECTION_ORDER), FALLBACK.name)
"""The platforms the launcher detects and serves, in detection order."""

__all__ = ["DETECTION_ORDER", "FALLBACK", "PLATFORMS", "Host", "HostFacts", "LaunchDefaults",
           "Platform", "detect_host", "get_platform"]


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
    """The host kind, by one rule:

    1. `platform` given (`--platform`) is authoritative, as vLLM's `VLLM_TARGET_DEVICE=cpu` is:
       only that platform's detector runs (its errors still count), and the host it finds is
       used as found, or, finding none, a host named by the flag. No platform declines it.
    2. Otherwise each platform in `DETECTION_ORDER` detects in turn and the first that finds
       its devices claims the host (the later ones are not probed), unless it declines them for
       the installed vLLM (`vllm_build` "cpu": a CPU build serves on the CPU even where NVIDIA
       GPUs are present); a declined host is served on `FALLBACK`, with the detector's evidence
       and note.
    3. No detector finds anything: `FALLBACK` (the CPU).
    """
    environ = os.environ if environ is None else environ
    if path_env is None:
        path_env = environ.get("PATH", os.defpath)
    facts = HostFacts(Path(root), environ, path_env, vllm_build)
    if platform is not None:
        if platform not in PLATFORMS:
            raise SpecDecodeConfigError(
                f"platform {quote_value(platform)} is unknown; use one of {', '.join(PLATFORMS)}"
            )
        return (_REGISTRY[platform].detect(facts)
                or Host(platform, evidence=(f"--platform {platform}",)))
    for detector in DETECTION_ORDER:
        host = detector.detect(facts)
        if host is None:
            continue
        declined = detector.declines(host, facts)
        if declined is None:
            return host
        return Host(FALLBACK.name, evidence=(*host.evidence, declined.evidence),
                    notes=(declined.note,))
    searched = " or ".join(p.devices_label for p in DETECTION_ORDER)
    return Host(FALLBACK.name, evidence=(f"no {searched} found",))

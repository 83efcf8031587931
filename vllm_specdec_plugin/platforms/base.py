"""What every platform module provides, and the probes they share.

A platform module (cpu.py, cuda.py, rbln.py) owns its platform's policy the way vllm-rbln's
`RblnPlatform` owns RBLN's: how the host is detected, the launcher's defaults there, what the
platform changes in vLLM's capabilities, and what it refuses. A new platform is one module with
one `Platform` subclass, and one line in `platforms/__init__.py`'s registry.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from vllm_specdec_plugin.core.errors import SpecDecodeConfigError, quote_value
from vllm_specdec_plugin.core.types import EngineRequest, PlatformCapabilities
from vllm_specdec_plugin.inputs.vllm_caps import pipeline_refusals, static_schedule_reasons

_TOOL_TIMEOUT_S = 10


@dataclass(frozen=True)
class Host:
    """What the launcher found on this host."""

    platform: str
    devices: tuple[str, ...] = ()
    """Device indices visible to the engine."""
    device_names: tuple[str, ...] = ()
    """Model names, e.g. "RBLN-CA25" or "NVIDIA H200" (empty when no tool told)."""
    evidence: tuple[str, ...] = field(default_factory=tuple)
    """What the detection was based on, for the dry run."""
    notes: tuple[str, ...] = ()
    """What the launcher should tell the operator about this choice."""


@dataclass
class LaunchDefaults:
    """What a platform adds to the launcher's `vllm serve` command (flags the user did not
    give) and to its environment (None removes a variable), with notes for the operator."""

    flags: list[str] = field(default_factory=list)
    env: dict[str, str | None] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


class Platform:
    """One platform's policy. Subclasses override what differs from this default."""

    name: str = ""
    cuda_graphs: bool = False
    """Whether vLLM's default cudagraph_mode captures full CUDA graphs here."""

    def detect(self, root: Path, environ: Mapping[str, str],
               path_env: str | None) -> Host | None:
        """The host, if this platform's devices are here (None: not this platform)."""
        return None

    def launch_defaults(self, host: Host, opted_in: bool, root: Path,
                        environ: Mapping[str, str]) -> LaunchDefaults:
        return LaunchDefaults()

    def adjust(self, caps: PlatformCapabilities, args: Any) -> PlatformCapabilities:
        """This platform's changes to what the installed vLLM can run."""
        return caps

    def refusals(self, engine: EngineRequest, environ: Mapping[str, str],
                 device_name: str | None) -> tuple[str, ...]:
        """Why speculative decoding cannot run here at all (each one an error)."""
        return ()

    def capabilities(self, installed: PlatformCapabilities, engine: EngineRequest, args: Any,
                     environ: Mapping[str, str],
                     device_name: str | None) -> PlatformCapabilities:
        """The complete capabilities for one engine start: vLLM's, this platform's changes,
        what the schedule and pipeline parallelism allow per method, and the refusals."""
        caps = self.adjust(replace(installed, platform=self.name or installed.platform), args)
        static = (static_schedule_reasons(caps.methods, caps.v2_methods,
                                          graphs=self.cuda_graphs)
                  if caps.batch_schedule else {})
        refused_with_pp = (pipeline_refusals(engine.checkpoint.architectures, caps.v2_methods)
                           if engine.pipeline_parallel_size > 1 and engine.checkpoint is not None
                           else {})
        return replace(caps, static_schedule=static, pipeline_refusals=refused_with_pp,
                       device_name=device_name,
                       refusals=self.refusals(engine, environ, device_name))


def run_tool(tool: str, args: list[str], path_env: str | None) -> str | None:
    exe = shutil.which(tool, path=path_env)
    if exe is None:
        return None
    try:
        done = subprocess.run([exe, *args], capture_output=True, text=True,
                              timeout=_TOOL_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None


def numbered(directory: Path, prefix: str) -> list[str]:
    if not directory.is_dir():
        return []
    pattern = re.compile(rf"^{re.escape(prefix)}(\d+)$")
    found = [m.group(1) for p in directory.iterdir() if (m := pattern.match(p.name))]
    return sorted(found, key=int)


def parse_device_list(value: str, env_name: str) -> tuple[str, ...]:
    """A `0,1,2` device list from env; anything else is an error naming the variable."""
    items = tuple(item.strip() for item in value.split(",") if item.strip())
    if not items or not all(item.isdigit() for item in items):
        raise SpecDecodeConfigError(
            f"{env_name}={quote_value(value)} is not a device list; write indices such as "
            f"{env_name}=0,1"
        )
    return items

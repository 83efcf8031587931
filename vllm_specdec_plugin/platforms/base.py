"""What every platform module provides, and the probes they share.

A platform module (cpu.py, cuda.py, rbln.py) owns its platform's policy the way vllm-rbln's
`RblnPlatform` owns RBLN's: how the host is detected (with its edge cases, as each of vLLM's
`*_platform_plugin()` detectors owns its own), the launcher's defaults there, what the platform
changes in vLLM's capabilities, and what it refuses. A new platform is one module with one
`Platform` subclass, and one line in `platforms/__init__.py`'s registry.
"""

from __future__ import annotations

import os
import re
import selectors
import shutil
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from vllm_specdec_plugin.core.errors import SpecDecodeConfigError, quote_value
from vllm_specdec_plugin.core.limits import MAX_TOOL_OUTPUT_BYTES, decode_text
from vllm_specdec_plugin.core.types import EngineRequest, PlatformCapabilities
from vllm_specdec_plugin.inputs.vllm_caps import (
    pipeline_refusals,
    static_schedule_reasons,
    vllm_serves_architecture,
)

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


@dataclass(frozen=True)
class HostFacts:
    """What host detection reads. Every probe goes through these, so tests build device trees
    under `root` and put small stand-in tools on `path_env`."""

    root: Path
    """The filesystem root the device files (`dev/`, `sys/`) are looked up under."""
    environ: Mapping[str, str]
    """The process env (device lists such as CUDA_VISIBLE_DEVICES)."""
    path_env: str | None
    """The PATH the device tools (nvidia-smi, rbln-smi) are looked up on."""
    vllm_build: str | None = None
    """The installed vLLM's build: "cpu" for a CPU build, None otherwise."""


@dataclass(frozen=True)
class Declined:
    """Devices a platform found but the installed vLLM cannot use: the host is served on the
    CPU instead (`Platform.declines`)."""

    evidence: str
    """Added to the found devices' evidence, e.g. "the installed vLLM is a CPU build"."""
    note: str
    """What the launcher tells the operator: what was found, why it is not used, the fix."""


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
    devices_label: str = ""
    """What detection looks for, e.g. "NVIDIA GPU" (named when nothing was found)."""
    cuda_graphs: bool = False
    """Whether vLLM's default cudagraph_mode captures full CUDA graphs here."""

    def detect(self, facts: HostFacts) -> Host | None:
        """The host, if this platform's devices are here (None: not this platform). Raises
        `SpecDecodeConfigError` when the facts contradict each other (a device list naming
        devices the host does not have)."""
        return None

    def declines(self, host: Host, facts: HostFacts) -> Declined | None:
        """Why the installed vLLM cannot serve on the devices `detect` found (None: it can)."""
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
        what the schedule and pipeline parallelism allow per method, whether vLLM's own
        implementation serves the target, and the refusals."""
        caps = self.adjust(replace(installed, platform=self.name or installed.platform), args)
        static = (static_schedule_reasons(caps.methods, caps.v2_methods,
                                          graphs=self.cuda_graphs)
                  if caps.batch_schedule else {})
        refused_with_pp = (pipeline_refusals(engine.checkpoint.architectures, caps.v2_methods)
                           if engine.pipeline_parallel_size > 1 and engine.checkpoint is not None
                           else {})
        served = (vllm_serves_architecture(engine.checkpoint.architectures)
                  if engine.checkpoint is not None else None)
        return replace(caps, static_schedule=static, pipeline_refusals=refused_with_pp,
                       device_name=device_name, vllm_serves_target=served,
                       refusals=self.refusals(engine, environ, device_name))


def run_tool(tool: str, args: list[str], path_env: str | None) -> str | None:
    """What `tool args` prints, or None when it is not on PATH, fails or hangs.

    Its output is bounded (`MAX_TOOL_OUTPUT_BYTES`, read as it comes, so an endless printer
    costs nothing) and must be UTF-8; either bound broken is refused naming the tool.
    """
    exe = shutil.which(tool, path=path_env)
    if exe is None:
        return None
    command = " ".join([tool, *args])
    try:
        proc = subprocess.Popen([exe, *args], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL)
    except (OSError, ValueError):
        return None
    try:
        data = _read_output(proc, time.monotonic() + _TOOL_TIMEOUT_S)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()
    if data is None:
        return None
    if len(data) > MAX_TOOL_OUTPUT_BYTES:
        raise SpecDecodeConfigError(
            f"{command} printed more than {MAX_TOOL_OUTPUT_BYTES} bytes; fix the device tools "
            f"or take {quote_value(exe)} off PATH")
    if proc.returncode != 0:
        return None
    return decode_text(data, f"the output of {command}",
                       f"fix the device tools or take {quote_value(exe)} off PATH")


def _read_output(proc: subprocess.Popen[bytes], deadline: float) -> bytes | None:
    """Up to `MAX_TOOL_OUTPUT_BYTES` + 1 bytes of `proc`'s stdout until it ends; None when the
    deadline passes first."""
    assert proc.stdout is not None
    chunks: list[bytes] = []
    size = 0
    with selectors.DefaultSelector() as selector:
        selector.register(proc.stdout, selectors.EVENT_READ)
        while size <= MAX_TOOL_OUTPUT_BYTES:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not selector.select(remaining):
                return None
            chunk = os.read(proc.stdout.fileno(), 65536)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    if size <= MAX_TOOL_OUTPUT_BYTES:
        remaining = deadline - time.monotonic()
        try:
            proc.wait(max(remaining, 0))
        except subprocess.TimeoutExpired:
            return None
    return b"".join(chunks)


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

"""Host detection: RBLN NPUs, then NVIDIA GPUs, else CPU, from device files, tools and env.

Every probe goes through `root` (the filesystem root) and the given PATH and env, so tests can
build device trees and put small stand-in tools on PATH.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from vllm_specdec_plugin import rbln
from vllm_specdec_plugin.errors import SpecDecodeConfigError, quote_value

PLATFORMS = ("rbln", "cuda", "cpu")
RBLN_TOOLS = ("rbln-smi", "rbln-stat")
RBLN_NAME = re.compile(r"\bRBLN-[A-Z]{1,4}\d+[A-Z0-9]*\b")
_NVIDIA_LINE = re.compile(r"^GPU (\d+): (.+?)(?: \(UUID: ([^)]+)\))?$")
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


def _run_tool(tool: str, args: list[str], path_env: str | None) -> str | None:
    exe = shutil.which(tool, path=path_env)
    if exe is None:
        return None
    try:
        done = subprocess.run([exe, *args], capture_output=True, text=True,
                              timeout=_TOOL_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None


def _numbered(directory: Path, prefix: str) -> list[str]:
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


def detect_rbln(root: Path, environ: Mapping[str, str], path_env: str | None) -> Host | None:
    evidence, names = [], []
    devices = _numbered(root / "dev", "rbln")
    if devices:
        evidence.append(f"{root / 'dev'}/rbln{{{','.join(devices)}}}")
    sys_devices = _numbered(root / "sys/class/rebellions", "rbln")
    if sys_devices:
        evidence.append(f"{root / 'sys/class/rebellions'} ({len(sys_devices)} devices)")
        devices = devices or sys_devices
    for tool in RBLN_TOOLS:
        output = _run_tool(tool, [], path_env)
        if output is not None:
            names = RBLN_NAME.findall(output)
            evidence.append(f"{tool} on PATH ({len(names)} NPUs listed)")
            break
    if environ.get(rbln.FORCE_NPU_NAME_ENV):
        names = names or [environ[rbln.FORCE_NPU_NAME_ENV]]
        evidence.append(rbln.FORCE_NPU_NAME_ENV)
    visible_env = next((n for n in (rbln.DEVICES_ENV, rbln.LEGACY_DEVICES_ENV)
                        if environ.get(n)), None)
    if visible_env:
        evidence.append(visible_env)
    if not evidence:
        return None
    if not devices and names:
        devices = [str(i) for i in range(len(names))]
    if visible_env:
        visible = parse_device_list(environ[visible_env], visible_env)
        missing = [d for d in visible if devices and d not in devices]
        if missing:
            raise SpecDecodeConfigError(
                f"{visible_env}={quote_value(environ[visible_env])} names NPUs "
                f"{','.join(missing)} that this host does not have (found: "
                f"{','.join(devices) or 'none'}); list only present devices"
            )
        devices = list(visible)
    return Host("rbln", tuple(devices), tuple(names), tuple(evidence))


def detect_cuda(root: Path, environ: Mapping[str, str], path_env: str | None) -> Host | None:
    evidence, devices, names = [], [], []
    output = _run_tool("nvidia-smi", ["-L"], path_env)
    if output is not None:
        for line in output.splitlines():
            match = _NVIDIA_LINE.match(line.strip())
            if match:
                devices.append(match.group(1))
                names.append(match.group(2))
        evidence.append(f"nvidia-smi -L ({len(devices)} GPUs)")
    dev_files = _numbered(root / "dev", "nvidia")
    if dev_files:
        evidence.append(f"{root / 'dev'}/nvidia{{{','.join(dev_files)}}}")
        devices = devices or dev_files
    visible = environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and evidence:
        if visible.strip() in ("", "-1", "none", "NoDevFiles"):
            return None  # GPUs present but hidden from this container: serve on CPU
        if all(part.strip().isdigit() for part in visible.split(",")):
            wanted = parse_device_list(visible, "CUDA_VISIBLE_DEVICES")
            missing = [d for d in wanted if d not in devices]
            if missing:
                raise SpecDecodeConfigError(
                    f"CUDA_VISIBLE_DEVICES={quote_value(visible)} names GPUs "
                    f"{','.join(missing)} that this host does not have (found: "
                    f"{','.join(devices)}); list only present GPUs"
                )
            devices = list(wanted)
        else:  # GPU UUIDs or MIG ids: count them
            devices = [part.strip() for part in visible.split(",") if part.strip()]
        evidence.append("CUDA_VISIBLE_DEVICES")
    if not evidence:
        return None
    return Host("cuda", tuple(devices), tuple(names), tuple(evidence))


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
        host = detect_rbln(root, environ, path_env)
        if host or platform == "rbln":
            return host or Host("rbln", evidence=("--platform rbln",))
    if platform in (None, "cuda"):
        host = detect_cuda(root, environ, path_env)
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


# --- memory: the node's, and the container's cgroup limit ----------------------------------

CGROUP_UNLIMITED = 1 << 60  # cgroup v1 writes "no limit" as a huge page-rounded number


@dataclass(frozen=True)
class Memory:
    """Memory the engine may use here, and where that figure came from."""

    available: int | None
    """The smaller of the node's MemAvailable and the container's cgroup limit (bytes)."""
    source: str


def available_memory(root: Path) -> Memory:
    """min(/proc/meminfo MemAvailable, cgroup v2 memory.max / v1 memory.limit_in_bytes).

    A pod's limit is set on its cgroup, not on the node: sizing from /proc/meminfo alone asks
    for more than the container may have, and the kernel OOM-kills it.
    """
    node = _meminfo_available(root / "proc/meminfo")
    limit = cgroup_memory_limit(root)
    if limit is not None and (node is None or limit[0] < node):
        node_text = f"node MemAvailable {_gib(node)}" if node is not None else "no /proc/meminfo"
        return Memory(limit[0], f"cgroup limit {_gib(limit[0])} ({limit[1]}; {node_text})")
    if node is None:
        return Memory(None, f"no MemAvailable in {root / 'proc/meminfo'} and no cgroup limit")
    return Memory(node, f"node MemAvailable {_gib(node)}"
                  + (f" (below cgroup limit {_gib(limit[0])})" if limit else ""))


def _gib(size: int) -> str:
    return f"{size / (1 << 30):.1f} GiB"


def _meminfo_available(path: Path) -> int | None:
    try:
        for line in path.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def cgroup_memory_limit(root: Path) -> tuple[int, str] | None:
    """The tightest memory limit on this process's cgroup and its ancestors, and its file.

    cgroup v2 (`memory.max`) or v1 (`memory.limit_in_bytes`), found through /proc/self/cgroup;
    inside a cgroup namespace the container's own cgroup is the mount's root.
    """
    base = root / "sys/fs/cgroup"
    v2 = (base / "cgroup.controllers").exists()
    mount = base if v2 else base / "memory"
    name = "memory.max" if v2 else "memory.limit_in_bytes"
    relative = _self_cgroup(root, "" if v2 else "memory")
    leaf = mount / relative.strip("/") if relative else mount
    if not leaf.is_dir():
        leaf = mount
    tightest = None
    for directory in (leaf, *leaf.parents):
        limit = _read_limit(directory / name)
        if limit is not None and (tightest is None or limit < tightest[0]):
            tightest = (limit, str(directory / name))
        if directory == mount:
            break
    return tightest


def _self_cgroup(root: Path, controller: str) -> str | None:
    """This process's cgroup path for `controller` ("" for v2's unified line)."""
    try:
        lines = (root / "proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        controllers = parts[1].split(",") if parts[1] else [""]
        if controller in controllers:
            return parts[2]
    return None


def _read_limit(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    if not text.isdigit():
        return None  # "max": no limit
    value = int(text)
    return value if 0 < value < CGROUP_UNLIMITED else None

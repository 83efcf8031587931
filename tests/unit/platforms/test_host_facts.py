"""Host facts that are not clean ASCII or not bounded: cgroup and /proc files, device tools."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest
from support.bounded import run_bounded

from vllm_specdec_plugin.core.errors import SpecDecodeConfigError
from vllm_specdec_plugin.core.limits import MAX_TOOL_OUTPUT_BYTES
from vllm_specdec_plugin.platforms import detect_host
from vllm_specdec_plugin.platforms.memory import available_memory, cgroup_memory_limit

GIB = 1 << 30


def cgroup_root(tmp_path: Path, limit: bytes, meminfo: bytes = b"MemAvailable: 16777216 kB\n",
                self_cgroup: bytes = b"0::/\n") -> Path:
    root = tmp_path / "root"
    (root / "proc/self").mkdir(parents=True)
    (root / "proc/meminfo").write_bytes(meminfo)
    (root / "proc/self/cgroup").write_bytes(self_cgroup)
    cgroup = root / "sys/fs/cgroup"
    cgroup.mkdir(parents=True)
    (cgroup / "cgroup.controllers").write_text("memory\n")
    (cgroup / "memory.max").write_bytes(limit)
    return root


@pytest.mark.parametrize("limit", ["²\n".encode(), "٣٢١\n".encode(), b"\xff\xfe12\n",
                                   b"9" * 70_000, b"1" * 25 + b"\n", b"-5\n", b""])
def test_cgroup_limit_that_is_not_an_ascii_number_is_no_limit(tmp_path, limit):
    root = cgroup_root(tmp_path, limit)
    assert cgroup_memory_limit(root) is None
    memory = available_memory(root)
    assert memory.available == 16 * GIB and "node MemAvailable" in memory.source


def test_cgroup_limit_in_ascii_digits_is_read(tmp_path):
    assert cgroup_memory_limit(cgroup_root(tmp_path, b"8589934592\n"))[0] == 8 * GIB


@pytest.mark.parametrize("meminfo", [b"MemAvailable: \xff kB\n", "MemAvailable: ² kB\n".encode(),
                                     b"MemAvailable:\n", b"\x00" * 100])
def test_meminfo_garbage_means_unknown(tmp_path, meminfo):
    root = cgroup_root(tmp_path, b"max\n", meminfo=meminfo)
    assert available_memory(root).available is None


@pytest.mark.parametrize("self_cgroup", [b"0::/\xff\n", b"0::/" + b"x" * 300 + b"\n",
                                         b"0::/../../..\n"])
def test_proc_self_cgroup_garbage_falls_back_to_the_mount(tmp_path, self_cgroup):
    root = cgroup_root(tmp_path, b"4294967296\n", self_cgroup=self_cgroup)
    assert cgroup_memory_limit(root)[0] == 4 * GIB


def tool(bin_dir: Path, name: str, body: str) -> str:
    bin_dir.mkdir(parents=True, exist_ok=True)
    path = bin_dir / name
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return str(bin_dir)


def test_nvidia_smi_printing_non_utf8_is_refused_naming_the_tool(tmp_path):
    path = tool(tmp_path / "bin", "nvidia-smi", r"printf 'GPU 0: NVIDIA H\377 (UUID: x)\n'")
    with pytest.raises(SpecDecodeConfigError, match=r"nvidia-smi -L is not UTF-8 text "
                                                    r"\(byte 0xff at offset 15\); fix"):
        detect_host(tmp_path, {"PATH": path}, path)


def test_rbln_smi_printing_non_utf8_is_refused(tmp_path):
    path = tool(tmp_path / "bin", "rbln-smi", r"printf 'NPU 0 RBLN-CR03 \200\n'")
    with pytest.raises(SpecDecodeConfigError, match="rbln-smi is not UTF-8 text"):
        detect_host(tmp_path, {"PATH": path}, path)


def test_launcher_dry_run_with_such_a_tool_exits_2_with_one_line(tmp_path, capsys):
    from vllm_specdec_plugin.launcher import main

    path = tool(tmp_path / "bin", "nvidia-smi", r"printf '\377\n'")
    rc = main(["--dry-run", "--model", "m", "--root", str(tmp_path)],
              {"PATH": path, "KAITO_ANNOTATIONS_FILE": "", "KAITO_INFERENCE_CONFIG": ""})
    err = capsys.readouterr().err
    assert rc == 2 and len(err.strip().splitlines()) == 1 and "nvidia-smi" in err


def test_endless_tool_output_is_bounded_in_memory(tmp_path):
    """Today's code kept all of 10 s of output in memory (gigabytes from `yes`)."""
    path = tool(tmp_path / "bin", "nvidia-smi", "exec yes 'GPU 0: NVIDIA H100 (UUID: GPU-a)'")
    done = run_bounded(f"""
        from vllm_specdec_plugin.core.errors import SpecDecodeConfigError
        from vllm_specdec_plugin.platforms import detect_host
        try:
            detect_host({str(tmp_path)!r}, {{"PATH": {path!r}}}, {path!r})
        except SpecDecodeConfigError as exc:
            print("REFUSED", exc.message)
    """, memory_mib=256, timeout_s=30)
    assert done.returncode == 0 and "REFUSED" in done.stdout, done
    assert f"printed more than {MAX_TOOL_OUTPUT_BYTES} bytes" in done.stdout
    assert done.seconds < 10


def test_clean_tool_output_still_detects(tmp_path):
    path = tool(tmp_path / "bin", "nvidia-smi",
                "echo 'GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-a)'")
    host = detect_host(tmp_path, {"PATH": path}, path)
    assert host.platform == "cuda" and host.devices == ("0",)
    assert json.dumps(host.device_names) == '["NVIDIA H100 80GB HBM3"]'

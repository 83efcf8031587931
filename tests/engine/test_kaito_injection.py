"""Route 3 into a cluster: KAITO's controller injects `--speculative-config='<json>'` itself.

KAITO (issue #2286, PRs #2303/#2312) writes the config into the container command it runs through
`/bin/sh -c`, shell-single-quoted, compact JSON with sorted keys. A pod that runs the plugin and
is opted in then sees that config as the engine's own: the plugin keeps it exactly as KAITO
wrote it and applies only its engine-side rules (the vllm model implementation where the method
needs it, async scheduling off where the method cannot run with it, platform caps).
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys

import pytest
from conftest import clean_env, free_port, http, kill_group, wait_healthy

pytestmark = pytest.mark.engine

# Exactly the JSON KAITO's controller injects (compact, sorted keys).
KAITO_TUNED = '{"method":"mtp","num_speculative_tokens":1}'
KAITO_FALLBACK = '{"method":"ngram","num_speculative_tokens":5,"prompt_lookup_max":4}'
OPT_IN = {"KAITO_ENABLE_SPECULATIVE_DECODING": "true", "KAITO_ANNOTATIONS_FILE": ""}
SERVE_FLAGS = ["--enforce-eager", "--max-model-len", "1024", "--kv-cache-memory-bytes",
               str(1 << 30), "--disable-uvicorn-access-log"]


def kaito_command(program: list[str], model: str, config: str, *flags: str) -> str:
    """The `/bin/sh -c` string in KAITO's shape: `... --speculative-config='<json>'`."""
    quoted = " ".join(shlex.quote(part) for part in [*program, model, *flags])
    return f"{quoted} --speculative-config='{config}'"


# Async scheduling: vLLM 0.32 runs mtp with it (left to vLLM), ngram without it (turned off).
# model_impl: mtp drafts with vLLM's own layers of the target ("vllm", said); ngram leaves "auto".
@pytest.mark.parametrize(("config", "async_scheduling", "model_impl"), [
    (KAITO_TUNED, None, "vllm"), (KAITO_FALLBACK, False, "auto")])
def test_launcher_keeps_kaitos_injected_config_and_applies_engine_rules(config, async_scheduling,
                                                                        model_impl, tmp_path):
    launcher = [sys.executable, "-m", "vllm_specdec_plugin.launcher", "--dry-run",
                "--platform", "cpu", "--model"]
    command = kaito_command(launcher, "Qwen/Qwen3.5-4B", config, "--")
    done = subprocess.run(["/bin/sh", "-c", command], capture_output=True, text=True,
                          env=clean_env(OPT_IN, tmp_path), timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    plan = json.loads(done.stdout)
    decision = plan["decision"]
    assert decision["speculative_config"] == json.loads(config)  # exactly KAITO's
    assert decision["source"] == "user-config (engine arguments)"
    assert decision["model_impl"] == model_impl  # the engine-side rule, said when it changes
    said = [w for w in decision["warnings"] if w.startswith("model_impl 'auto' -> 'vllm'")]
    assert len(said) == (model_impl == "vllm")
    assert decision["async_scheduling"] is async_scheduling
    assert f"--speculative-config={config}" in plan["argv"]  # passed on as KAITO wrote it


def test_launcher_not_opted_in_leaves_kaitos_command_alone(tmp_path):
    launcher = [sys.executable, "-m", "vllm_specdec_plugin.launcher", "--dry-run",
                "--platform", "cpu", "--model"]
    command = kaito_command(launcher, "Qwen/Qwen3.5-4B", KAITO_FALLBACK, "--")
    done = subprocess.run(["/bin/sh", "-c", command], capture_output=True, text=True,
                          env=clean_env({"KAITO_ANNOTATIONS_FILE": ""}, tmp_path), timeout=300,
                          check=False)
    assert done.returncode == 0, done.stderr
    plan = json.loads(done.stdout)
    assert plan["decision"]["enabled"] is False and plan["decision"]["source"] == "off"
    assert f"--speculative-config={KAITO_FALLBACK}" in plan["argv"]


def test_vllm_serve_runs_kaitos_injected_fallback_unchanged(tiny_llama, tmp_path):
    """Plain `vllm serve` through `/bin/sh -c`, KAITO's command shape: the engine runs exactly
    KAITO's ngram config, the plugin's line says so, and /metrics reports its source."""
    port, log = free_port(), tmp_path / "serve.log"
    program = [sys.executable, "-m", "vllm_specdec_plugin.vllm_entry", "serve"]
    command = kaito_command(program, str(tiny_llama), KAITO_FALLBACK, "--port", str(port),
                            *SERVE_FLAGS)
    with log.open("w") as out:
        proc = subprocess.Popen(["/bin/sh", "-c", f"exec {command}"], stdout=out,
                                stderr=subprocess.STDOUT, env=clean_env(OPT_IN, tmp_path),
                                start_new_session=True)
    try:
        wait_healthy(proc, port, log)
        status, text = http("GET", f"http://127.0.0.1:{port}/metrics")
        assert status == 200
    finally:
        proc.terminate()
        proc.wait(timeout=60)
        kill_group(proc)
    output = log.read_text()
    shown = json.dumps(json.loads(KAITO_FALLBACK), sort_keys=True)
    assert f"speculative decoding on: {shown}" in output
    assert "source=user-config (engine arguments)" in output
    gauge = [line for line in text.splitlines() if line.startswith("vllm_specdec_decision_info{")]
    assert gauge and 'source="user-config (engine arguments)"' in gauge[0]
    assert 'method="ngram"' in gauge[0] and 'num_speculative_tokens="5"' in gauge[0]

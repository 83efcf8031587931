"""The plugin against vLLM 0.33.0's own code (what GPU hosts run), in .venv-vllm033.

tests/support/vllm033_probe.py runs the plugin's hook inside vLLM 0.33's
`EngineArgs.create_engine_config` on tiny checkpoints, on vLLM 0.33's CpuPlatform and on its own
CudaPlatform class (an 8x H100 host stood in for the driver; .ci/setup-vllm033-env.sh lists every
stand-in). Each case asserts what vLLM 0.33 resolved: method, k, whether the schedule survived,
async scheduling, model runner (V1/V2) and cudagraph_mode. All cases of a platform share one
process.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import TESTS, clean_env, needs_venv, sibling_venv_python
from support import script_runs
from support.checkpoints import build_eagle3_draft, build_eagle_draft, build_mtp_target
from support.controller_checks import (
    caps_contract,
    check_caps_contract,
    check_contract,
    contract,
)

VLLM033_PYTHON = sibling_venv_python("VLLM033_VENV", ".venv-vllm033")
pytestmark = [pytest.mark.engine, pytest.mark.contract,
              needs_venv(VLLM033_PYTHON, ".ci/setup-vllm033-env.sh")]
OPT_IN = {"KAITO_ENABLE_SPECULATIVE_DECODING": "true"}
V1 = {"VLLM_USE_V2_MODEL_RUNNER": "0"}
NGRAM = {"method": "ngram", "num_speculative_tokens": 5, "prompt_lookup_max": 4}
SCHEDULE_NGRAM = [[1, 4, 5], [5, 8, 2], [9, 65536, 0]]
# On CUDA the break points are the GPU rows (core/schedule.py): full k up to 8, half up to 32
# for draft-free methods; full up to 16, half up to 64 for model drafts.
SCHEDULE_NGRAM_CUDA = [[1, 8, 5], [9, 32, 2], [33, 65536, 0]]
SCHEDULE_DRAFT_K3_CUDA = [[1, 16, 3], [17, 64, 1], [65, 65536, 0]]
FULL, PIECEWISE = "FULL_AND_PIECEWISE", "PIECEWISE"


@pytest.fixture(scope="module")
def models(tiny_llama, tmp_path_factory):
    root = tmp_path_factory.mktemp("vllm033")
    return {"llama": str(tiny_llama), "mimo": str(build_mtp_target(root / "mimo")),
            "eagle": str(build_eagle_draft(tiny_llama, root / "eagle")),
            "eagle3": str(build_eagle3_draft(tiny_llama, root / "eagle3"))}


def cuda_cases(m: dict) -> list[dict]:
    llama, mimo = {"model": m["llama"]}, {"model": m["mimo"]}
    eagle3 = {"method": "eagle3", "model": m["eagle3"], "num_speculative_tokens": 2}
    return [
        {"name": "ngram", "env": OPT_IN, "engine_args": llama},
        {"name": "ngram-v1", "env": {**OPT_IN, **V1}, "engine_args": llama},
        # what the plugin avoids: the same schedule given to vLLM 0.33 on V1, no plugin
        {"name": "control-v1-schedule", "env": V1, "engine_args": {
            **llama, "speculative_config": {
                **NGRAM, "num_speculative_tokens_per_batch_size": SCHEDULE_NGRAM}}},
        {"name": "mtp-preset", "env": OPT_IN,
         "engine_args": {**mimo, "served_model_name": ["XiaomiMiMo/MiMo-7B-Base"]}},
        {"name": "mtp-checkpoint", "env": OPT_IN, "engine_args": mimo},
        {"name": "eagle", "env": {**OPT_IN, "VLLM_SPECDEC_DRAFT_MODEL": m["eagle"]},
         "engine_args": llama},
        {"name": "eagle3", "env": {**OPT_IN, "VLLM_SPECDEC_DRAFT_MODEL": m["eagle3"]},
         "engine_args": llama},
        {"name": "suffix", "env": {**OPT_IN, "VLLM_SPECDEC_FALLBACK": "suffix"},
         "engine_args": llama},
        {"name": "user-config", "env": OPT_IN, "engine_args": {
            **llama, "speculative_config": {"method": "ngram", "num_speculative_tokens": 3,
                                            "prompt_lookup_max": 2}}},
        {"name": "async-explicit", "env": OPT_IN,
         "engine_args": {**llama, "async_scheduling": True}},
        {"name": "async-explicit-v1", "env": {**OPT_IN, **V1},
         "engine_args": {**llama, "async_scheduling": True}},
        {"name": "medusa", "env": OPT_IN, "engine_args": {**llama, "speculative_config": {
            "method": "medusa", "model": m["eagle"], "num_speculative_tokens": 2}}},
        {"name": "pp2-eagle3-llama", "env": OPT_IN, "engine_args": {
            **llama, "pipeline_parallel_size": 2, "speculative_config": eagle3}},
        {"name": "pp2-eagle3-mimo", "env": OPT_IN, "engine_args": {
            **mimo, "pipeline_parallel_size": 2, "speculative_config": eagle3}},
        {"name": "prefill-only", "env": OPT_IN, "engine_args": {**llama, "kv_transfer_config": {
            "kv_connector": "NixlConnector", "kv_role": "kv_producer"}}},
        {"name": "decode", "env": OPT_IN, "engine_args": {**llama, "kv_transfer_config": {
            "kv_connector": "NixlConnector", "kv_role": "kv_consumer"}}},
        {"name": "tp2", "env": OPT_IN, "engine_args": {**llama, "tensor_parallel_size": 2}},
        {"name": "dp2", "env": OPT_IN, "engine_args": {**llama, "data_parallel_size": 2}},
        # last: not opted in, the plugin is silent (and would not announce its changes)
        {"name": "plain", "env": {}, "engine_args": llama},
    ]


def probe(platform: str, cases: list[dict], tmp: Path) -> dict[str, dict]:
    env = clean_env(tmp=tmp)
    if platform == "cpu":
        env["VLLM_TARGET_DEVICE"] = "cpu"
    probe_script = TESTS / "support" / "vllm033_probe.py"
    done = script_runs.run(probe_script, [platform, json.dumps(cases)], env, 400,
                           python=str(VLLM033_PYTHON), prelude=script_runs.CONTRACT_PRELUDE,
                           starts_engine=False)
    results = {}
    for line in done.stdout.splitlines():
        if line.startswith("PROBE "):
            result = json.loads(line[6:])
            results[result["name"]] = result
    assert len(results) == len(cases), f"{done.stdout[-3000:]}\n{done.stderr[-5000:]}"
    results["log"] = done.stdout + done.stderr
    return results


@pytest.fixture(scope="module")
def cuda(models, tmp_path_factory):
    return probe("cuda", cuda_cases(models), tmp_path_factory.mktemp("env"))


@pytest.fixture(scope="module")
def cpu(models, tmp_path_factory):
    cases = [{"name": "ngram", "env": OPT_IN, "engine_args": {"model": models["llama"]}}]
    return probe("cpu", cases, tmp_path_factory.mktemp("env"))


def resolved(result: dict) -> tuple:
    assert result.get("error") is None, result.get("trace")
    return (result["method"], result["num_speculative_tokens"], result["schedule"],
            result["async_scheduling"], result["model_runner"], result["cudagraph_mode"])


def test_cpu_platform_ngram_fallback_keeps_its_schedule(cpu):
    result = cpu["ngram"]
    assert result["platform"] == "CpuPlatform"
    assert resolved(result)[:5] == ("ngram", 5, SCHEDULE_NGRAM, False, "V1")
    assert result["decision"]["source"] == "ngram-fallback"


def test_vllm033_is_inside_the_tested_range_of_the_patches(cuda):
    log = cuda["log"]
    assert "outside the versions" not in log
    assert "[engine-config-hook] (tested on vLLM 0.30, 0.32, 0.33)" in log


def test_cuda_v2_ngram_fallback_keeps_schedule_and_full_graphs(cuda):
    result = cuda["ngram"]
    assert result["platform"] == "H100Host"
    assert resolved(result) == ("ngram", 5, SCHEDULE_NGRAM_CUDA, True, "V2", FULL)


def test_cuda_v1_ngram_fallback_is_static_so_full_graphs_stay(cuda):
    assert resolved(cuda["ngram-v1"]) == ("ngram", 5, None, False, "V1", FULL)
    assert any("PIECEWISE" in n for n in cuda["ngram-v1"]["decision"]["notes"])
    # the hazard the plugin avoids: vLLM 0.33 itself downgrades when given the schedule on V1
    assert resolved(cuda["control-v1-schedule"]) == (
        "ngram", 5, SCHEDULE_NGRAM, False, "V1", PIECEWISE)
    assert cuda["control-v1-schedule"]["decision"] is None


def test_cuda_tuned_mtp_preset_is_exactly_kaitos_config(cuda):
    result = cuda["mtp-preset"]
    assert result["decision"]["source"] == "tuned-preset"
    assert result["decision"]["speculative_config"] == {"method": "mtp",
                                                        "num_speculative_tokens": 1}
    assert resolved(result) == ("mtp", 1, None, True, "V2", FULL)


def test_cuda_checkpoint_mtp_is_static_because_of_upstream_48494(cuda):
    result = cuda["mtp-checkpoint"]
    assert result["decision"]["source"] == "checkpoint-mtp"
    assert any("48494" in n for n in result["decision"]["notes"])
    assert resolved(result) == ("mtp", 1, None, True, "V2", FULL)


@pytest.mark.parametrize("method", ["eagle", "eagle3"])
def test_cuda_eagle_drafts_keep_schedule_on_v2(cuda, method):
    result = cuda[method]
    assert result["decision"]["source"] == "draft-model"
    assert resolved(result) == (method, 3, SCHEDULE_DRAFT_K3_CUDA, True, "V2", FULL)


def test_cuda_suffix_runs_on_v1_with_a_static_config(cuda):
    result = cuda["suffix"]
    assert result["decision"]["source"] == "suffix-fallback"
    method, _, schedule, *rest = resolved(result)  # k: vLLM's default tree depth
    assert (method, schedule, *rest) == ("suffix", None, False, "V1", FULL)


def test_cuda_user_config_untouched(cuda):
    result = cuda["user-config"]
    assert result["decision"]["source"] == "user-config (engine arguments)"
    assert resolved(result) == ("ngram", 3, None, True, "V2", FULL)


@pytest.mark.parametrize(("case", "method", "runner"), [
    ("ngram", "ngram", None), ("ngram-v1", "ngram", "v1"), ("suffix", "suffix", None)])
def test_whatifs_async_rule_is_what_vllm033_resolves_on_cuda(cuda, case, method, runner):
    """`whatif` prices the plain engine's hidden host work exactly where vLLM 0.33 schedules
    the plain engine asynchronously and the speculating one not (`drafter.async_scheduling`)."""
    from vllm_specdec_plugin.whatif.drafter import async_scheduling, host_drafter

    assert cuda["plain"].get("error") is None and cuda["plain"]["async_scheduling"] is True
    rule = async_scheduling(method, host_drafter(method, "cuda", runner).name, "cuda", 0.001,
                            "0.33")
    assert rule.hidden_s == (0.0 if cuda[case]["async_scheduling"] else 0.001), rule.why


def test_cuda_explicit_async_scheduling(cuda):
    assert resolved(cuda["async-explicit"]) == ("ngram", 5, SCHEDULE_NGRAM_CUDA, True, "V2", FULL)
    # on V1 vLLM 0.33 refuses explicit async with ngram; the plugin turns it off: it starts
    assert resolved(cuda["async-explicit-v1"]) == ("ngram", 5, None, False, "V1", FULL)
    assert any("--async-scheduling turned off" in w
               for w in cuda["async-explicit-v1"]["decision"]["warnings"])


def test_cuda_medusa_refused_by_name(cuda):
    result = cuda["medusa"]
    assert result["error_type"] == "SpecDecodeConfigError"
    assert "'medusa' is not supported on vLLM 0.33.0 on cuda" in result["error"]


def test_cuda_pipeline_parallel_eagle3(cuda):
    # Llama's decoder passes hidden states across stages: allowed, with the PP warning
    result = cuda["pp2-eagle3-llama"]
    assert resolved(result)[:2] == ("eagle3", 2)
    assert any("#2303" in w for w in result["decision"]["warnings"])
    # MiMo's does not (vLLM 0.33 V2 would refuse at model load): refused up front, by name
    result = cuda["pp2-eagle3-mimo"]
    assert result["error_type"] == "SpecDecodeConfigError"
    assert "method 'eagle3' cannot run with pipeline parallelism" in result["error"]
    assert "MiMoModel (MiMoForCausalLM)" in result["error"]


def test_cuda_prefill_only_instance_runs_without_speculation(cuda):
    result = cuda["prefill-only"]
    assert result["decision"]["source"] == "prefill-only"
    assert resolved(result)[:3] == (None, None, None)
    assert resolved(cuda["decode"]) == ("ngram", 5, SCHEDULE_NGRAM_CUDA, True, "V2", FULL)


def test_cuda_tensor_parallel_2(cuda):
    result = cuda["tp2"]
    assert result["tensor_parallel_size"] == 2
    assert resolved(result) == ("ngram", 5, SCHEDULE_NGRAM_CUDA, True, "V2", FULL)


def test_cuda_data_parallel_2_static(cuda):
    result = cuda["dp2"]
    assert result["data_parallel_size"] == 2
    assert any("data parallelism" in n for n in result["decision"]["notes"])
    assert resolved(result)[:3] == ("ngram", 5, None)
    assert resolved(result)[4:] == ("V2", FULL)


def test_schedule_controller_contract_on_vllm_033(tiny_llama, tmp_path):
    """vLLM 0.33's own Scheduler and AsyncScheduler run the controller's wrappers: each step's
    `num_spec_tokens_to_schedule` is the k the controller wrote, only k values of the dense
    lookup are written, and Model Runner V2 reads that field and captures a graph per value."""
    found = contract(str(VLLM033_PYTHON), str(tiny_llama), tmp_path)
    check_contract(found)
    assert found["mrv2_reads"] is True and found["mrv2_captures_dense_lookup"] is True


def test_request_caps_contract_on_vllm_033(tiny_llama, tmp_path):
    """vllm_xargs.num_speculative_tokens through vLLM 0.33's own InputProcessor, Scheduler
    (synchronous drafts) and AsyncScheduler (placeholders, the EAGLE/MTP path)."""
    check_caps_contract(caps_contract(str(VLLM033_PYTHON), str(tiny_llama), tmp_path))

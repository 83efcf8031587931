"""Run the plugin's hook inside vLLM 0.33.0's own config resolution; print what vLLM resolved.

Runs in .venv-vllm033 (.ci/setup-vllm033-env.sh):
`python tests/support/vllm033_probe.py PLATFORM CASES` with PLATFORM "cpu" (vLLM 0.33's CpuPlatform)
or "cuda" (vLLM 0.33's own CudaPlatform class, device queries answered as an 8x H100 host; see
`stand_in_cuda`) and CASES a JSON list of {"name", "env", "engine_args"}. One `PROBE {json}` line
per case: the plugin's decision (as its hook applied it), or vLLM's refusal, and what
`EngineArgs.create_engine_config()` resolved.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
import types
from dataclasses import asdict

BASE_ENV = dict(os.environ)
H100_NAME = "NVIDIA H100 80GB HBM3"


def run_case(case: dict) -> dict:
    from vllm.engine.arg_utils import EngineArgs

    os.environ.clear()
    os.environ.update({**BASE_ENV, **case.get("env", {})})
    args = None
    try:
        args = EngineArgs(max_model_len=512, **case["engine_args"])
        config = args.create_engine_config()
    except BaseException as exc:  # the plugin's SystemExit and vLLM's refusals alike
        result = {"error_type": type(exc).__name__, "error": str(exc)[:2000],
                  "trace": traceback.format_exc()[-1500:]}
    else:
        spec = config.speculative_config
        schedule = getattr(spec, "num_speculative_tokens_per_batch_size", None)
        result = {
            "platform": type(__import__("vllm.platforms").platforms.current_platform).__name__,
            "method": getattr(spec, "method", None),
            "num_speculative_tokens": getattr(spec, "num_speculative_tokens", None),
            "schedule": [list(r) for r in schedule] if schedule else None,
            "async_scheduling": config.scheduler_config.async_scheduling,
            "model_runner": "V2" if config.use_v2_model_runner else "V1",
            "cudagraph_mode": config.compilation_config.cudagraph_mode.name,
            "tensor_parallel_size": config.parallel_config.tensor_parallel_size,
            "data_parallel_size": config.parallel_config.data_parallel_size,
        }
    decision = getattr(args, "_specdec_plugin_decision", None)
    result["decision"] = asdict(decision) if decision is not None else None
    return {"name": case["name"], **result}


def stand_in_cuda(cases: list[dict]) -> None:
    """vLLM 0.33's CudaPlatform on a machine without CUDA (what is stood in, and why).

    1. `vllm._C_stable_libtorch`, the compiled ops `vllm.platforms.cuda` imports, links against
       libcuda.so.1 and libtorch_cuda.so: an empty module takes its place (no kernel runs while
       the config is built).
    2. Model classes are inspected (and cached by vLLM) and the targets' classes imported under
       vLLM's CpuPlatform: importing model code under CUDA needs the flash-attention and _C
       kernels. Every case's config is built once there, which inspects targets and drafts.
    3. vLLM's own CudaPlatform class (the one it picks without NVML) with device queries answered
       as an 8x H100 host replaces the CPU platform in every module that bound it.
    4. Triton has no active driver here: HAS_TRITON is set as on a CUDA host, so the V1/V2
       model-runner choice is vLLM's own rule (VLLM_USE_V2_MODEL_RUNNER=0 gives V1).
    """
    sys.modules["vllm._C_stable_libtorch"] = types.ModuleType("vllm._C_stable_libtorch")
    import vllm.platforms as platforms
    from vllm.platforms.cpu import CpuPlatform

    cpu = platforms._current_platform = CpuPlatform()
    for case in cases:
        run_case(case)  # the plugin decides here too, so its drafts get inspected as well
    from vllm.model_executor.models.registry import ModelRegistry

    for model in {case["engine_args"]["model"] for case in cases}:
        with open(os.path.join(model, "config.json")) as handle:
            for arch in json.load(handle).get("architectures", []):
                ModelRegistry._try_load_model_cls(arch)  # the class itself, imported on CPU

    import vllm.config.vllm as config_vllm
    import vllm.platforms.cuda as cuda
    import vllm.triton_utils as triton_utils
    from vllm.platforms.interface import DeviceCapability

    class H100Host(cuda.CudaPlatform):
        """vLLM 0.33's CudaPlatform; only the device queries answer for the absent GPUs."""

        @classmethod
        def get_device_capability(cls, device_id: int = 0) -> DeviceCapability:
            return DeviceCapability(9, 0)

        @classmethod
        def get_device_name(cls, device_id: int = 0) -> str:
            return H100_NAME

        @classmethod
        def get_device_total_memory(cls, device_id: int = 0) -> int:
            return 80 << 30

        @classmethod
        def device_count(cls) -> int:
            return 8

        @classmethod
        def is_fully_connected(cls, physical_device_ids: list[int]) -> bool:
            return True

        @classmethod
        def get_device_uuid(cls, device_id: int = 0) -> str:
            return f"GPU-standin-{device_id}"

    gpu = platforms._current_platform = H100Host()
    for module in list(sys.modules.values()):
        if getattr(module, "__dict__", {}).get("current_platform") is cpu:
            module.current_platform = gpu
    triton_utils.HAS_TRITON = config_vllm.HAS_TRITON = True


def main() -> None:
    platform, cases = sys.argv[1], json.loads(sys.argv[2])
    if platform == "cuda":
        stand_in_cuda(cases)
    for case in cases:
        print("PROBE " + json.dumps(run_case(case), default=list), flush=True)
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()

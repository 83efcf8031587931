"""Run vllm-rbln 0.12's real code on the plugin's decisions; print what happened as JSON.

Runs in .venv-rbln (vLLM 0.30 + vllm-rbln, `rebel` stand-in), one case per fresh process
(vllm-rbln keeps process-wide state): `python tests/support/rbln_probe.py CASE MODEL_DIR`.
"""

from __future__ import annotations

import json
import os
import sys
import traceback


def load_plugins(order: str) -> None:
    """Load the two general plugins in the given order, as vLLM would in either install order."""
    import vllm.plugins
    import vllm_rbln

    import vllm_specdec_plugin

    vllm.plugins.plugins_loaded = True  # the order below replaces vLLM's own loading
    steps = [vllm_specdec_plugin.register, vllm_rbln.register_ops]
    for step in steps if order == "ours-first" else reversed(steps):
        step()


def engine_config(model: str, **kwargs: object) -> dict:
    from vllm.engine.arg_utils import EngineArgs

    config = EngineArgs(model=model, max_model_len=512, **kwargs).create_engine_config()
    spec = config.speculative_config
    return {
        "platform": type(__import__("vllm.platforms").platforms.current_platform).__name__,
        "resolved_model_impl": os.environ.get("_VLLM_RBLN_RESOLVED_MODEL_IMPL"),
        "method": getattr(spec, "method", None),
        "num_speculative_tokens": getattr(spec, "num_speculative_tokens", None),
        "async_scheduling": config.scheduler_config.async_scheduling,
        "_config": config,
    }


def model_runner(config: object) -> dict:
    """Construct vllm-rbln's model runner (its proposer and rejection sampler) on the CPU."""
    import torch
    from vllm.config import set_current_vllm_config
    from vllm.distributed import ensure_model_parallel_initialized, init_distributed_environment

    with set_current_vllm_config(config):
        init_distributed_environment(world_size=1, rank=0, local_rank=0,
                                     distributed_init_method="tcp://127.0.0.1:29533",
                                     backend="gloo")
        ensure_model_parallel_initialized(1, 1)
        from vllm_rbln.v1.worker.rbln_model_runner import RBLNModelRunner

        runner = RBLNModelRunner(config, torch.device("cpu"))
        return {"drafter": type(runner.drafter).__name__,
                "max_spec_len": runner.rejection_sampler.impl.max_spec_len}


def run(case: str, model: str) -> dict:
    ngram = {"method": "ngram", "num_speculative_tokens": 40, "prompt_lookup_max": 4}
    if case in ("ours-first", "rbln-first"):
        load_plugins(case)
        return engine_config(model)
    load_plugins("rbln-first")
    if case == "token-cap":
        result = engine_config(model, speculative_config=ngram)
        return {**result, **model_runner(result["_config"])}
    if case == "upstream-sampler":
        result = engine_config(model, speculative_config={**ngram, "num_speculative_tokens": 100},
                               additional_config={"use_custom_sampler": False})
        return {**result, **model_runner(result["_config"])}
    if case == "unsupported-method":  # what vllm-rbln does with a method outside its list
        os.environ.pop("KAITO_ENABLE_SPECULATIVE_DECODING", None)
        result = engine_config(model, model_impl="vllm", speculative_config={
            "method": "draft_model", "model": model, "num_speculative_tokens": 2})
        return {**result, **model_runner(result["_config"])}
    kwargs = json.loads(os.environ.get("PROBE_ENGINE_ARGS", "{}"))
    return engine_config(model, **kwargs)


def main() -> None:
    case, model = sys.argv[1], sys.argv[2]
    try:
        result = run(case, model)
    except BaseException as exc:  # report every refusal, SystemExit included
        result = {"error_type": type(exc).__name__, "error": str(exc),
                  "trace": traceback.format_exc()[-2000:]}
    result.pop("_config", None)
    print("PROBE " + json.dumps(result))
    sys.stdout.flush()
    os._exit(0)  # skip interpreter teardown of half-initialised distributed state


if __name__ == "__main__":
    main()

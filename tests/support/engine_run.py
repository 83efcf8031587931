"""Run a real vLLM engine (offline `LLM()`) in this process and print what it did as JSON.

Used by the engine tests as `python tests/support/engine_run.py SPEC_JSON` in a fresh process, so
every engine starts clean and loads the plugin through its entry point as in production.
SPEC: {"llm": {...LLM kwargs...}, "prompts": [...], "max_tokens": N, "config_only": bool,
"sampling": [{...SamplingParams kwargs...} per prompt] (optional; default greedy),
"one_at_a_time": bool (each prompt served alone, in order: the whatif exactness test),
"continue_tokens": N (after the counters are read, each prompt again with N more tokens: the
model's tokens past each output's end, as "continuations"), "logprobs": N (greedy: the top N
per position, reported as "top2")}
With "config_only", only `EngineArgs(**llm).create_engine_config()` runs: vLLM's own config
resolution (where it refuses bad combinations), without loading weights.
Output (last stdout line): {"speculative_config", "model_impl", "async_scheduling",
"token_ids", "draft_tokens" (per request), "metrics"} or {"error_type", "error"} when the engine
refused to start.
"""

from __future__ import annotations

import json
import sys

from engine_layout import llm_kwargs
from greedy import top_two


def spec_summary(config: object) -> dict | None:
    if config is None:
        return None
    keys = ("method", "num_speculative_tokens", "prompt_lookup_max", "prompt_lookup_min",
            "model", "num_speculative_tokens_per_batch_size")
    out = {key: getattr(config, key, None) for key in keys}
    draft = getattr(config, "draft_model_config", None)
    out["model"] = getattr(draft, "model", None) if draft is not None else out["model"]
    return out


def counters(llm: object) -> dict[str, float]:
    values: dict[str, float] = {}
    for metric in llm.get_metrics():
        if metric.name.startswith("vllm:spec_decode") and hasattr(metric, "value"):
            values[metric.name] = values.get(metric.name, 0) + metric.value
    return values


def continuations(llm: object, spec: dict, outputs: list) -> dict:
    """With "continue_tokens": each prompt served again (alone) with that many more tokens;
    the tokens past the first run's output where the longer run began with it, else None."""
    extra = spec.get("continue_tokens")
    if not extra:
        return {}
    from vllm import SamplingParams

    found = []
    for prompt, output in zip(spec["prompts"], outputs, strict=True):
        first = list(output.outputs[0].token_ids)
        params = SamplingParams(temperature=0.0, max_tokens=len(first) + extra,
                                ignore_eos=True)
        more = list(llm.generate([prompt], params, use_tqdm=False)[0].outputs[0].token_ids)
        found.append(more[len(first):] if more[:len(first)] == first else None)
    return {"continuations": found}


def resolved(config: object) -> dict:
    return {
        "speculative_config": spec_summary(config.speculative_config),
        "model_impl": str(config.model_config.model_impl),
        "async_scheduling": config.scheduler_config.async_scheduling,
        "max_num_seqs": config.scheduler_config.max_num_seqs,
    }


def config_only(kwargs: dict) -> None:
    """vLLM's config resolution only; the plugin's decision (as the hook made it) alongside."""
    from dataclasses import asdict

    from vllm.engine.arg_utils import EngineArgs

    args = None
    try:
        args = EngineArgs(**kwargs)
        config = args.create_engine_config()
        out = {**resolved(config), "config_hash": config.compute_hash()}
    except Exception as exc:  # as an application would: a plugin's SystemExit escapes this
        out = {"error_type": type(exc).__name__, "error": str(exc)}
    decision = getattr(args, "_specdec_plugin_decision", None)
    out["decision"] = asdict(decision) if decision is not None else None
    print(json.dumps(out, default=list))


def main() -> None:
    spec = json.loads(sys.argv[1])
    from vllm import LLM, SamplingParams

    kwargs = llm_kwargs({"enforce_eager": True, "kv_cache_memory_bytes": 1 << 30,
                         "max_model_len": 1024, "disable_log_stats": False, **spec["llm"]})
    if spec.get("config_only"):
        config_only(kwargs)
        return
    try:
        llm = LLM(**kwargs)
    except Exception as exc:  # as an application would: a plugin's SystemExit escapes this
        print(json.dumps({"error_type": type(exc).__name__, "error": str(exc),
                          "is_value_error": isinstance(exc, ValueError)}))
        sys.exit(0)
    config = llm.llm_engine.vllm_config
    params = SamplingParams(temperature=0.0, max_tokens=spec.get("max_tokens", 48),
                            ignore_eos=True, logprobs=spec.get("logprobs"))
    if spec.get("sampling"):  # one SamplingParams per prompt (mixed greedy/sampled batches)
        params = [SamplingParams(**{"max_tokens": spec.get("max_tokens", 48),
                                    "ignore_eos": True, **extra}) for extra in spec["sampling"]]
    if spec.get("one_at_a_time"):
        outputs = [llm.generate([prompt], params, use_tqdm=False)[0]
                   for prompt in spec.get("prompts", [])]
    else:
        outputs = llm.generate(spec.get("prompts", []), params, use_tqdm=False)
    print(json.dumps({
        **resolved(config),
        "token_ids": [list(o.outputs[0].token_ids) for o in outputs],
        # with "logprobs": per position, [best logprob, runner-up id, its logprob]
        "top2": [[top_two(position) for position in o.outputs[0].logprobs or []]
                 for o in outputs],
        "prompt_token_ids": [list(o.prompt_token_ids or []) for o in outputs],
        # vLLM's per-request counters (`per_request_spec_decode_metrics`), None where not kept
        "draft_tokens": [getattr(getattr(o.outputs[0], "spec_decode_metrics", None),
                                 "num_draft_tokens", None) for o in outputs],
        # with per_request_spec_decode_metrics="detailed": draft tokens of each verify step
        "drafted_per_step": [list(getattr(getattr(o.outputs[0], "spec_decode_metrics", None),
                                          "per_step_drafted", None) or [])
                             for o in outputs],
        "metrics": counters(llm),
        **continuations(llm, spec, outputs),
    }))
    llm.llm_engine.engine_core.shutdown()  # do not leave the engine-core process behind


if __name__ == "__main__":
    main()

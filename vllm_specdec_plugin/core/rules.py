"""What a speculative config must satisfy on a platform: the decision's checks and adjustments.

Pure, like `decide`, which calls these: refusals come back as messages that name the input and
the fix; adjustments (the token cap, async scheduling) come back with their warning.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from vllm_specdec_plugin.core.errors import quote_value
from vllm_specdec_plugin.core.methods import NGRAM_FALLBACK, PROMISED_METHODS, method_spec
from vllm_specdec_plugin.core.settings import ANNOTATION_KEY, RUNTIME_KEY
from vllm_specdec_plugin.core.types import (
    SOURCE_SPECULATORS,
    Annotation,
    EngineRequest,
    PlatformCapabilities,
)


def pipeline_errors(method: str | None, engine: EngineRequest, caps: PlatformCapabilities,
                     warnings: list[str]) -> list[str]:
    """Pipeline parallelism: refuse what vLLM refuses there, warn that it usually eats the gain."""
    if engine.pipeline_parallel_size <= 1:
        return []
    reason = caps.pipeline_refusals.get(method or "")
    if reason:
        return [f"method {method!r} cannot run with pipeline parallelism "
                f"(pipeline_parallel_size={engine.pipeline_parallel_size}) on "
                f"{engine_name(caps)}: {reason}; use another method or drop "
                "--pipeline-parallel-size"]
    warnings.append(
        f"pipeline parallelism (pipeline_parallel_size={engine.pipeline_parallel_size}) usually "
        "eats speculative decoding's gain: each verify step waits for every stage, and the "
        "proposer runs on the last stage only (KAITO proposal #2303); measure before relying "
        "on it")
    return []


def opt_in_error(annotation: Annotation) -> str:
    return (f"annotation {ANNOTATION_KEY} (from {annotation.source}) is "
            f"{quote_value(annotation.value)}; allowed values are exactly \"true\" or "
            "\"false\" (lower case, quoted in YAML)")


def runtime_errors(runtime: Annotation) -> tuple[str, ...]:
    if runtime.value is None or runtime.value == "vllm":
        return ()
    return (
        f"{ANNOTATION_KEY}=\"true\" needs the vLLM runtime, but {RUNTIME_KEY} (from "
        f"{runtime.source}) is {quote_value(runtime.value)}; set {RUNTIME_KEY}: \"vllm\" or "
        f"{ANNOTATION_KEY}: \"false\"",
    )


def config_errors(config: Mapping[str, Any], source: str,
                   caps: PlatformCapabilities) -> list[str]:
    method, draft = config.get("method"), config.get("model")
    where = f"speculative-config from {source}"
    errors = _token_errors(config, where)
    if method is None:
        if draft is None and source != SOURCE_SPECULATORS:
            errors.append(f"{where} has neither `method` nor `model`; set `method`, one of "
                          f"{', '.join(PROMISED_METHODS)}")
        return errors  # with a draft `model`, vLLM infers the method from its checkpoint
    if not isinstance(method, str):
        return [*errors, f"{where}: `method` must be a string, got {quote_value(method)}"]
    if method not in caps.methods:
        errors.append(
            f"{where}: method {method!r} is not supported on {engine_name(caps)}; use one of "
            f"{', '.join(m for m in PROMISED_METHODS if m in caps.methods)}"
        )
    elif _needs_draft(method) and not draft:
        errors.append(
            f"{where}: method {method!r} needs a draft checkpoint; add \"model\": "
            "\"<draft repo id or path>\", or use a draft-free method (ngram, suffix)"
        )
    elif config.get("num_speculative_tokens") is None and _needs_tokens(method, draft):
        example = dict(NGRAM_FALLBACK) if method == "ngram" else {
            "method": method, "num_speculative_tokens": _example_tokens(method)}
        errors.append(
            f"{where}: method {method!r} needs num_speculative_tokens"
            + ("" if _tokens_rule(method) == "always" else " when no `model` is given")
            + " (vLLM has no default for it and refuses to start); add it, e.g. "
            + json.dumps(example)
        )
    elif method == "suffix" and not caps.suffix_available:
        errors.append(
            f"{where}: method 'suffix' needs the arctic_inference package, which is not "
            "installed; pip install arctic-inference (or the plugin's [suffix] extra)"
        )
    return errors


def _tokens_rule(method: str) -> str:
    spec = method_spec(method)
    return spec.tokens_required if spec is not None else "never"


def _needs_tokens(method: str, draft: object) -> bool:
    rule = _tokens_rule(method)
    return rule == "always" or (rule == "without-model" and not draft)


def _example_tokens(method: str) -> int:
    spec = method_spec(method)
    return (spec.default_tokens if spec is not None else None) or 1


def _needs_draft(method: str) -> bool:
    spec = method_spec(method)
    return spec is not None and spec.needs_draft_checkpoint


def _token_errors(config: Mapping[str, Any], where: str) -> list[str]:
    tokens = config.get("num_speculative_tokens")
    if tokens is None or (isinstance(tokens, int) and not isinstance(tokens, bool)
                          and tokens >= 1):
        return []
    return [f"{where}: num_speculative_tokens must be a positive integer, got "
            f"{quote_value(tokens)}"]


def cap_num_tokens(config: dict[str, Any], caps: PlatformCapabilities,
                    warnings: list[str]) -> dict[str, Any]:
    tokens, cap = config.get("num_speculative_tokens"), caps.max_num_speculative_tokens
    if cap is None or tokens is None or tokens <= cap:
        return config
    warnings.append(
        f"num_speculative_tokens {tokens} -> {cap}: the {caps.platform} sampler handles at most "
        f"{cap} speculative tokens"
    )
    return {**config, "num_speculative_tokens": cap}


def model_impl_choice(method: str | None, engine: EngineRequest, caps: PlatformCapabilities,
                      warnings: list[str]) -> tuple[str, list[str]]:
    """The `model_impl` the engine runs with, or why speculation cannot run on this target.

    The user's value is kept ("auto" when unset: vLLM resolves it, its own implementation where
    its registry lists the architecture, else its Transformers backend) unless the platform or
    the method needs vLLM's own implementation; then it becomes "vllm", with a warning when that
    changes what the user had, and a refusal where that implementation cannot serve the target.
    """
    asked = engine.model_impl or "auto"
    reason = caps.vllm_model_impl_only
    if reason is None and needs_native_target(method):
        needs = f"method {method!r} drafts with layers of vLLM's own implementation of the target"
        reason = f"{needs}, which vLLM's Transformers backend does not have"
        fix = "use a draft-free method (ngram, suffix)"
        if caps.vllm_serves_target is False:
            return asked, [f"{needs}, and {engine_name(caps)} has none for "
                           f"{unserved_target(engine)}; {fix}, or serve a target vLLM implements"]
        if asked not in ("auto", "vllm"):
            return asked, [f"model_impl {asked!r} (--model-impl) cannot run speculative "
                           f"decoding here: {reason}; set --model-impl vllm or leave it unset, "
                           f"or {fix}"]
        if asked == "auto" and caps.vllm_serves_target:
            # vLLM resolves "auto" to its own implementation when its registry lists the
            # architecture: "vllm" would change nothing, so the user's value stays, unannounced.
            return asked, []
    if reason is None:
        return asked, []
    if asked != "vllm":
        warnings.append(f"model_impl {asked!r} -> 'vllm': {reason}")
    return "vllm", []


def needs_native_target(method: object) -> bool:
    spec = method_spec(method) if isinstance(method, str) else None
    return spec is not None and spec.needs_native_target


def unserved_target(engine: EngineRequest) -> str:
    """The target whose architecture vLLM serves only through its Transformers backend."""
    architectures = engine.checkpoint.architectures if engine.checkpoint is not None else ()
    return (f"the target's architecture {', '.join(architectures)} (only its Transformers "
            "backend serves it)")


def async_incompatibility(method: str | None, caps: PlatformCapabilities,
                           engine: EngineRequest) -> str | None:
    if not caps.async_methods:
        return (f"{caps.platform} runs speculative decoding with synchronous scheduling only")
    if method is not None and method not in caps.async_methods:
        return (
            f"{engine_name(caps)} runs {method!r} speculative decoding with synchronous "
            "scheduling only (async works with: "
            f"{', '.join(m for m in PROMISED_METHODS if m in caps.async_methods)})"
        )
    if engine.pipeline_parallel_size > 1 and method not in caps.v2_methods:
        return (f"{engine_name(caps)} runs pipeline parallelism with speculative decoding "
                "on its V1 model runner, which schedules synchronously only")
    return None


def engine_name(caps: PlatformCapabilities) -> str:
    version = f" {caps.vllm_version}" if caps.vllm_version else ""
    return f"vLLM{version} on {caps.platform}"

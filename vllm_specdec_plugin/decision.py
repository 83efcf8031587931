"""The decision: a pure function from typed inputs to the speculative-decoding setup.

No I/O, no vLLM import: the engine hook and the explain CLI gather the inputs, call `decide`, and
apply or print the result.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, get_args

from vllm_specdec_plugin import rbln
from vllm_specdec_plugin.checkpoint import CheckpointInfo
from vllm_specdec_plugin.errors import quote_value
from vllm_specdec_plugin.inputs import ANNOTATION_KEY, RUNTIME_KEY, Annotation
from vllm_specdec_plugin.presets import PresetTable
from vllm_specdec_plugin.schedule import load_aware_schedule
from vllm_specdec_plugin.settings import FALLBACKS, Fallback

# KAITO's universal fallback (KAITO v0.13.0): deliberately conservative, no prompt_lookup_min.
NGRAM_FALLBACK: Mapping[str, Any] = {
    "method": "ngram",
    "num_speculative_tokens": 5,
    "prompt_lookup_max": 4,
}
# The plugin's own draft-free proposer (adaptive.py), loaded through vLLM's custom_class method;
# num_speculative_tokens is only its cap: it drafts per row what acceptance and load pay for.
ADAPTIVE_FALLBACK: Mapping[str, Any] = {
    "method": "custom_class",
    "model": "vllm_specdec_plugin.adaptive.AdaptiveProposer",
    "num_speculative_tokens": 16,
}
# The methods the product promises (the KAITO and RBLN pages).
PromisedMethod = Literal["ngram", "suffix", "eagle", "eagle3", "medusa", "mtp"]
PROMISED_METHODS: tuple[PromisedMethod, ...] = get_args(PromisedMethod)
DRAFT_MODEL_METHODS: tuple[PromisedMethod, ...] = ("eagle", "eagle3", "medusa")

# Why the config is what it is (`Decision.source`); a Literal so a type checker sees a typo.
Source = Literal["off", "user-config (engine arguments)", "user-config (inference_config.yaml)",
                 "tuned-preset", "ngram-fallback", "suffix-fallback", "adaptive-fallback",
                 "speculators-checkpoint", "checkpoint-mtp", "draft-model", "prefill-only"]
SOURCE_OFF: Source = "off"
SOURCE_USER_ENGINE: Source = "user-config (engine arguments)"
SOURCE_USER_FILE: Source = "user-config (inference_config.yaml)"
SOURCE_TUNED: Source = "tuned-preset"
SOURCE_FALLBACK: Source = "ngram-fallback"
SOURCE_SUFFIX_FALLBACK: Source = "suffix-fallback"
SOURCE_ADAPTIVE_FALLBACK: Source = "adaptive-fallback"
SOURCE_SPECULATORS: Source = "speculators-checkpoint"
SOURCE_CHECKPOINT_MTP: Source = "checkpoint-mtp"
SOURCE_DRAFT: Source = "draft-model"
SOURCE_PREFILL_ONLY: Source = "prefill-only"
KV_PRODUCER = "kv_producer"
EAGLE_DRAFT_TOKENS = 3


@dataclass(frozen=True)
class PlatformCapabilities:
    """What the installed vLLM on this platform can run (gathered by `capabilities.py`)."""

    platform: str
    """"cuda", "rbln", "cpu", or another vLLM device name."""
    vllm_version: str | None
    methods: frozenset[str]
    """Speculative methods the installed vLLM (and, on RBLN, vllm-rbln) accepts."""
    async_methods: frozenset[str]
    """Methods that run with async scheduling on this platform (empty: none do)."""
    pipeline_refusals: Mapping[str, str] = field(default_factory=dict)
    """Per method: why the installed vLLM refuses it with pipeline parallelism."""
    max_num_speculative_tokens: int | None = None
    """The platform's cap on num_speculative_tokens (RBLN's sampler), None for no cap."""
    suffix_available: bool = False
    """Whether `arctic_inference`, which the suffix method needs, is importable."""
    device_name: str | None = None
    """The accelerator's model name where known (RBLN ATOM NPUs refuse the vllm path)."""
    batch_schedule: bool = False
    """Whether vLLM has `num_speculative_tokens_per_batch_size` (a load-aware schedule)."""
    v2_methods: frozenset[str] = frozenset()
    """Methods the installed vLLM runs on Model Runner V2 on this platform."""
    static_schedule: Mapping[str, str] = field(default_factory=dict)
    """Per method: why vLLM here would drop the schedule, downgrade CUDA graphs or fail."""


@dataclass(frozen=True)
class EngineRequest:
    """What the engine itself was asked for (vLLM's own flags)."""

    model: str | None = None
    served_model_names: tuple[str, ...] = ()
    speculative_config: Mapping[str, Any] | None = None
    """Given to the engine directly: --speculative-config, --spec-*, LLM(speculative_config=)."""
    model_impl: str | None = "auto"
    async_scheduling: bool | None = None
    rbln_legacy_model_env: str | None = None
    """vllm-rbln's deprecated VLLM_RBLN_USE_VLLM_MODEL, which it checks against model_impl."""
    checkpoint: CheckpointInfo | None = None
    """What the target's own config.json says (local checkpoints only)."""
    max_num_seqs: int | None = None
    data_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    kv_role: str | None = None
    """vLLM's kv_transfer_config.kv_role: "kv_producer" is a prefill-only (disaggregated) role."""


@dataclass(frozen=True)
class KaitoRequest:
    """What KAITO and the operator asked for."""

    annotation: Annotation
    runtime: Annotation = field(default_factory=lambda: Annotation(None, "unset"))
    preset: str | None = None
    config_speculative_config: Mapping[str, Any] | None = None
    config_path: str | None = None
    draft: CheckpointInfo | None = None
    """The draft named by VLLM_SPECDEC_DRAFT_MODEL."""
    fallback: Fallback = "ngram"
    """The draft-free fallback (VLLM_SPECDEC_FALLBACK): one of FALLBACKS, "ngram" (KAITO's)."""
    schedule: bool = True
    """Whether the plugin's own choice gets a load-aware schedule (VLLM_SPECDEC_SCHEDULE)."""


@dataclass(frozen=True)
class Decision:
    """The speculative-decoding setup the engine runs with, and why."""

    enabled: bool
    source: Source
    method: str | None = None
    speculative_config: dict[str, Any] | None = None
    model_impl: str | None = None
    async_scheduling: bool | None = None
    preset: str | None = None
    platform: str | None = None
    warnings: tuple[str, ...] = ()
    errors: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    """Why the config looks as it does (the load-aware schedule's break points)."""

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=False, default=list)

    def summary(self) -> str:
        """The one INFO line logged at engine start."""
        if not self.enabled:
            return "; ".join([f"speculative decoding off ({self.source})", *self.notes])
        parts = [
            f"speculative decoding on: {json.dumps(self.speculative_config, sort_keys=True)}",
            f"source={self.source}" + (f" (preset {self.preset})" if self.preset else ""),
            f"model_impl={self.model_impl}",
            "async_scheduling="
            + ("vLLM default" if self.async_scheduling is None else str(self.async_scheduling)),
        ]
        parts += [f"adjusted: {warning}" for warning in self.warnings]
        parts += list(self.notes)
        return "; ".join(parts)


def decide(
    kaito: KaitoRequest,
    engine: EngineRequest,
    caps: PlatformCapabilities,
    presets: PresetTable,
) -> Decision:
    """Pick the speculative-decoding setup for one engine start."""
    opt_in, errors = _read_opt_in(kaito.annotation)
    if errors:
        return Decision(False, SOURCE_OFF, platform=caps.platform, errors=errors)
    if not opt_in:
        return Decision(False, SOURCE_OFF, platform=caps.platform)

    errors = list(_runtime_errors(kaito.runtime)) + list(_platform_errors(engine, caps))
    warnings: list[str] = []
    preset_name = None
    file_config = kaito.config_speculative_config
    if engine.speculative_config is not None:
        config = dict(engine.speculative_config)
        # The launcher passes the file's config on as a flag: same config, the file's source.
        source = SOURCE_USER_FILE if file_config == config else SOURCE_USER_ENGINE
        if file_config is not None and dict(file_config) != config:
            warnings.append(
                f"the speculative-config in {kaito.config_path} is not used: the engine was "
                "given its own, which wins"
            )
    elif file_config is not None:
        source, config = SOURCE_USER_FILE, dict(file_config)
    else:
        candidates = (kaito.preset, *engine.served_model_names, engine.model)
        if not any(candidates):
            errors.append(
                f"{ANNOTATION_KEY}=\"true\" needs a preset inference target, and none was "
                "found: set KAITO_PRESET_NAME, --served-model-name or --model"
            )
            return Decision(False, SOURCE_OFF, platform=caps.platform, errors=tuple(errors))
        if engine.kv_role == KV_PRODUCER and not errors:
            return Decision(False, SOURCE_PREFILL_ONLY, platform=caps.platform, notes=(
                "prefill-only instance (kv_transfer_config kv_role kv_producer): no "
                "speculative decoding; it helps decode only, and a proposer here would cost "
                "memory and setup for nothing (the decode instances get it)",))
        source, config, preset_name = _automatic_choice(kaito, engine, caps, presets,
                                                        candidates, errors)

    notes: list[str] = []
    errors += _config_errors(config, source, caps)
    errors += _pipeline_errors(config.get("method"), engine, caps, warnings)
    if errors:
        return Decision(False, source, platform=caps.platform, errors=tuple(errors))

    config = _cap_num_tokens(config, caps, warnings)
    method = config.get("method")
    if source == SOURCE_TUNED:
        notes.append("KAITO's tuned config exactly as KAITO validated it (no load-aware "
                     "schedule)")
    elif source not in (SOURCE_USER_ENGINE, SOURCE_USER_FILE, SOURCE_SPECULATORS):
        config = _with_schedule(config, kaito, engine, caps, notes)
    if source == SOURCE_SPECULATORS:
        config = _speculators_override(config, engine.checkpoint)
    if engine.kv_role == KV_PRODUCER:
        notes.append("prefill-only instance (kv_role kv_producer): speculation gains nothing "
                     "here; the user's config is kept as given")
    model_impl = "vllm"
    if engine.model_impl not in (None, "auto", "vllm"):
        warnings.append(
            f"model_impl {engine.model_impl!r} -> 'vllm': speculative decoding runs on the vLLM "
            "model implementation only (RBLN's optimum path refuses it)"
        )
    async_scheduling = engine.async_scheduling
    async_reason = _async_incompatibility(method, caps, engine)
    if async_reason and engine.async_scheduling is not False:
        async_scheduling = False
        asked = "--async-scheduling" if engine.async_scheduling else "async scheduling (default)"
        warnings.append(f"{asked} turned off: {async_reason}")
    return Decision(
        enabled=True,
        source=source,
        method=method,
        speculative_config=config,
        model_impl=model_impl,
        async_scheduling=async_scheduling,
        preset=preset_name,
        platform=caps.platform,
        warnings=tuple(warnings),
        notes=tuple(notes),
    )


def _speculators_override(config: dict, checkpoint: CheckpointInfo | None) -> dict | None:
    """What to pass for a speculators checkpoint: vLLM builds the config from the checkpoint and
    merges the engine's over it, so only what had to change (the token cap), else nothing."""
    tokens = config.get("num_speculative_tokens")
    if checkpoint is None or tokens == checkpoint.speculators_tokens:
        return None
    return {"num_speculative_tokens": tokens}


def _with_schedule(config: dict, kaito: KaitoRequest, engine: EngineRequest,
                   caps: PlatformCapabilities, notes: list[str]) -> dict:
    """The plugin's own choice with a load-aware schedule, only where vLLM keeps it as is."""
    method, tokens = config.get("method"), config.get("num_speculative_tokens")
    if method == ADAPTIVE_FALLBACK["method"]:
        notes.append("no per-batch-size schedule: the adaptive proposer sizes each row's draft "
                     "from its acceptance and the measured step cost")
        return config
    if not kaito.schedule:
        notes.append("static config: the load-aware schedule is off (VLLM_SPECDEC_SCHEDULE=off)")
        return config
    if not caps.batch_schedule:
        notes.append(f"static config: {_engine_name(caps)} has no "
                     "num_speculative_tokens_per_batch_size, so speculation stays on under load")
        return config
    if engine.data_parallel_size > 1:
        notes.append("static config: vLLM turns the per-batch-size schedule off with data "
                     "parallelism (ranks could pick different k and deadlock)")
        return config
    if not isinstance(tokens, int) or method is None:
        return config
    if method in caps.static_schedule:
        notes.append(f"static config: {caps.static_schedule[method]}")
        return config
    schedule = load_aware_schedule(method, tokens, engine.max_num_seqs)
    graphs = ("; on CUDA graphs vLLM captures decode graphs for each distinct k (more capture "
              "time and graph memory)" if method in caps.v2_methods else "")
    notes.append(
        "load-aware schedule (batch size -> speculative tokens): "
        + ", ".join(f"{a}-{b}: {k}" for a, b, k in schedule) + graphs)
    return {**config, "num_speculative_tokens_per_batch_size": schedule}


def _pipeline_errors(method: str | None, engine: EngineRequest, caps: PlatformCapabilities,
                     warnings: list[str]) -> list[str]:
    """Pipeline parallelism: refuse what vLLM refuses there, warn that it usually eats the gain."""
    if engine.pipeline_parallel_size <= 1:
        return []
    reason = caps.pipeline_refusals.get(method or "")
    if reason:
        return [f"method {method!r} cannot run with pipeline parallelism "
                f"(pipeline_parallel_size={engine.pipeline_parallel_size}) on "
                f"{_engine_name(caps)}: {reason}; use another method or drop "
                "--pipeline-parallel-size"]
    warnings.append(
        f"pipeline parallelism (pipeline_parallel_size={engine.pipeline_parallel_size}) usually "
        "eats speculative decoding's gain: each verify step waits for every stage, and the "
        "proposer runs on the last stage only (KAITO proposal #2303); measure before relying "
        "on it")
    return []


def _automatic_choice(
    kaito: KaitoRequest, engine: EngineRequest, caps: PlatformCapabilities,
    presets: PresetTable, candidates: tuple[str | None, ...], errors: list[str],
) -> tuple[str, dict[str, Any], str | None]:
    """The opted-in choice when the user set no config, best first."""
    target = engine.checkpoint
    preset = next(name for name in candidates if name)
    if target is not None and target.speculators:
        # vLLM builds the config from the checkpoint itself; checked here like any other.
        config = {"method": target.speculators_method, "model": target.path,
                  "num_speculative_tokens": target.speculators_tokens}
        return SOURCE_SPECULATORS, {k: v for k, v in config.items() if v is not None}, preset
    match = presets.find(candidates)
    if match is not None:
        tuned, matched = match
        return SOURCE_TUNED, dict(tuned.speculative_config), matched
    if target is not None and target.mtp_layers > 0:
        return SOURCE_CHECKPOINT_MTP, {"method": "mtp", "num_speculative_tokens": 1}, preset
    if kaito.draft is not None:
        draft = kaito.draft
        tokens = EAGLE_DRAFT_TOKENS
        if draft.draft_method == "medusa" and draft.num_heads:
            tokens = min(tokens, draft.num_heads)
        return SOURCE_DRAFT, {"method": draft.draft_method, "model": draft.path,
                              "num_speculative_tokens": tokens}, preset
    if kaito.fallback not in FALLBACKS:
        errors.append(f"VLLM_SPECDEC_FALLBACK={quote_value(kaito.fallback)} is not a draft-free "
                      f"fallback; use one of {', '.join(FALLBACKS)}")
    if kaito.fallback == "suffix":
        return SOURCE_SUFFIX_FALLBACK, {"method": "suffix"}, preset
    if kaito.fallback == "adaptive":
        if ADAPTIVE_FALLBACK["method"] not in caps.methods:
            errors.append(f"VLLM_SPECDEC_FALLBACK=adaptive needs vLLM's custom_class speculative "
                          f"method, which {_engine_name(caps)} does not run; use "
                          "VLLM_SPECDEC_FALLBACK=ngram or suffix")
        return SOURCE_ADAPTIVE_FALLBACK, dict(ADAPTIVE_FALLBACK), preset
    return SOURCE_FALLBACK, dict(NGRAM_FALLBACK), preset


def _read_opt_in(annotation: Annotation) -> tuple[bool, tuple[str, ...]]:
    if annotation.value is None or annotation.value == "false":
        return False, ()
    if annotation.value == "true":
        return True, ()
    return False, (
        f"annotation {ANNOTATION_KEY} (from {annotation.source}) is "
        f"{quote_value(annotation.value)}; allowed values are exactly \"true\" or \"false\" "
        "(lower case, quoted in YAML)",
    )


def _platform_errors(engine: EngineRequest, caps: PlatformCapabilities) -> tuple[str, ...]:
    if caps.platform != "rbln":
        return ()
    if rbln.is_atom(caps.device_name):
        return (rbln.atom_refusal(caps.device_name or ""),)
    conflict = rbln.legacy_model_env_conflict(engine.rbln_legacy_model_env)
    return (conflict,) if conflict else ()


def _runtime_errors(runtime: Annotation) -> tuple[str, ...]:
    if runtime.value is None or runtime.value == "vllm":
        return ()
    return (
        f"{ANNOTATION_KEY}=\"true\" needs the vLLM runtime, but {RUNTIME_KEY} (from "
        f"{runtime.source}) is {quote_value(runtime.value)}; set {RUNTIME_KEY}: \"vllm\" or "
        f"{ANNOTATION_KEY}: \"false\"",
    )


def _config_errors(config: Mapping[str, Any], source: str, caps: PlatformCapabilities) -> list:
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
            f"{where}: method {method!r} is not supported on {_engine_name(caps)}; use one of "
            f"{', '.join(m for m in PROMISED_METHODS if m in caps.methods)}"
        )
    elif method in DRAFT_MODEL_METHODS and not draft:
        errors.append(
            f"{where}: method {method!r} needs a draft checkpoint; add \"model\": "
            "\"<draft repo id or path>\", or use a draft-free method (ngram, suffix)"
        )
    elif method == "suffix" and not caps.suffix_available:
        errors.append(
            f"{where}: method 'suffix' needs the arctic_inference package, which is not "
            "installed; pip install arctic-inference (or the plugin's [suffix] extra)"
        )
    return errors


def _token_errors(config: Mapping[str, Any], where: str) -> list[str]:
    tokens = config.get("num_speculative_tokens")
    if tokens is None or (isinstance(tokens, int) and not isinstance(tokens, bool)
                          and tokens >= 1):
        return []
    return [f"{where}: num_speculative_tokens must be a positive integer, got "
            f"{quote_value(tokens)}"]


def _cap_num_tokens(config: dict, caps: PlatformCapabilities, warnings: list[str]) -> dict:
    tokens, cap = config.get("num_speculative_tokens"), caps.max_num_speculative_tokens
    if cap is None or tokens is None or tokens <= cap:
        return config
    warnings.append(
        f"num_speculative_tokens {tokens} -> {cap}: the {caps.platform} sampler handles at most "
        f"{cap} speculative tokens"
    )
    return {**config, "num_speculative_tokens": cap}


def _async_incompatibility(method: str | None, caps: PlatformCapabilities,
                           engine: EngineRequest) -> str | None:
    if not caps.async_methods:
        return (f"{caps.platform} runs speculative decoding with synchronous scheduling only")
    if method is not None and method not in caps.async_methods:
        return (
            f"{_engine_name(caps)} runs {method!r} speculative decoding with synchronous "
            "scheduling only (async works with: "
            f"{', '.join(m for m in PROMISED_METHODS if m in caps.async_methods)})"
        )
    if engine.pipeline_parallel_size > 1 and method not in caps.v2_methods:
        return (f"{_engine_name(caps)} runs pipeline parallelism with speculative decoding "
                "on its V1 model runner, which schedules synchronously only")
    return None


def _engine_name(caps: PlatformCapabilities) -> str:
    version = f" {caps.vllm_version}" if caps.vllm_version else ""
    return f"vLLM{version} on {caps.platform}"

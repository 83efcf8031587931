"""The decision: a pure function from typed inputs to the speculative-decoding setup.

No I/O, no vLLM import: `assembly` gathers the inputs, calls `decide`, and the engine hook,
`explain` and the launcher apply or print the result. What a method is and does comes from
`core.methods`; what a platform refuses comes in `PlatformCapabilities.refusals`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from vllm_specdec_plugin.core.errors import quote_value
from vllm_specdec_plugin.core.methods import (
    ADAPTIVE_FALLBACK,
    FALLBACKS,
    method_spec,
)
from vllm_specdec_plugin.core.presets import PresetTable, TunedPreset
from vllm_specdec_plugin.core.rules import (
    async_incompatibility,
    cap_num_tokens,
    config_errors,
    engine_name,
    model_impl_choice,
    needs_native_target,
    opt_in_error,
    pipeline_errors,
    runtime_errors,
    unserved_target,
)
from vllm_specdec_plugin.core.schedule import break_points, load_aware_schedule
from vllm_specdec_plugin.core.settings import ANNOTATION_KEY, FALLBACK_NAMES
from vllm_specdec_plugin.core.types import (
    KV_PRODUCER,
    SOURCE_CHECKPOINT_MTP,
    SOURCE_DRAFT,
    SOURCE_OFF,
    SOURCE_PREFILL_ONLY,
    SOURCE_SPECULATORS,
    SOURCE_TUNED,
    SOURCE_USER_ENGINE,
    SOURCE_USER_FILE,
    USER_SOURCES,
    CheckpointInfo,
    Decision,
    EngineRequest,
    KaitoRequest,
    PlatformCapabilities,
    Source,
)


def decide(
    kaito: KaitoRequest,
    engine: EngineRequest,
    caps: PlatformCapabilities,
    presets: PresetTable,
) -> Decision:
    """Pick the speculative-decoding setup for one engine start."""
    opt_in = kaito.annotation.opt_in
    if opt_in == "invalid":
        return Decision(False, SOURCE_OFF, platform=caps.platform,
                        errors=(opt_in_error(kaito.annotation),))
    if opt_in == "off":
        return Decision(False, SOURCE_OFF, platform=caps.platform)

    errors = [*runtime_errors(kaito.runtime), *caps.refusals]
    warnings: list[str] = []
    preset_name = None
    source: Source
    config: dict[str, Any]
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
                                                        candidates, errors, warnings)

    notes: list[str] = []
    errors += config_errors(config, source, caps)
    errors += pipeline_errors(config.get("method"), engine, caps, warnings)
    if errors:
        return Decision(False, source, platform=caps.platform, errors=tuple(errors))

    method = config.get("method")
    model_impl, impl_errors = model_impl_choice(method, engine, caps, warnings)
    if impl_errors:
        return Decision(False, source, platform=caps.platform, errors=tuple(impl_errors))
    config = cap_num_tokens(config, caps, warnings)
    if source == SOURCE_TUNED:
        notes.append("KAITO's tuned config exactly as KAITO validated it (no load-aware "
                     "schedule)")
    elif source not in (*USER_SOURCES, SOURCE_SPECULATORS):
        config = _with_schedule(config, kaito, engine, caps, notes)
    # Only the plugin's own schedule is learned; a user's config and KAITO's tuned presets run
    # exactly as given.
    schedule_control = (kaito.schedule_control and source not in USER_SOURCES
                        and source not in (SOURCE_TUNED, SOURCE_SPECULATORS)
                        and "num_speculative_tokens_per_batch_size" in config)
    if schedule_control:
        notes.append(_controller_note(config["num_speculative_tokens_per_batch_size"]))
    final_config: dict[str, Any] | None = config
    if source == SOURCE_SPECULATORS:
        final_config = _speculators_override(config, engine.checkpoint)
    if engine.kv_role == KV_PRODUCER:
        notes.append("prefill-only instance (kv_role kv_producer): speculation gains nothing "
                     "here; the user's config is kept as given")
    async_scheduling = engine.async_scheduling
    async_reason = async_incompatibility(method, caps, engine)
    if async_reason and engine.async_scheduling is not False:
        async_scheduling = False
        asked = "--async-scheduling" if engine.async_scheduling else "async scheduling (default)"
        warnings.append(f"{asked} turned off: {async_reason}")
    return Decision(
        enabled=True,
        source=source,
        method=method,
        speculative_config=final_config,
        model_impl=model_impl,
        async_scheduling=async_scheduling,
        preset=preset_name,
        platform=caps.platform,
        warnings=tuple(warnings),
        notes=tuple(notes),
        schedule_control=schedule_control,
    )


def _controller_note(schedule: list[list[int]]) -> str:
    k_set = sorted({k for _, _, k in schedule})
    return ("schedule controller on: learns k per batch-size bucket from this engine's own "
            "steps, among k in {" + ", ".join(map(str, k_set)) + "}, starting from the "
            "schedule above as its prior (docs/schedule-controller.md; "
            "VLLM_SPECDEC_SCHEDULE=static keeps the schedule fixed)")


def _speculators_override(config: dict[str, Any],
                          checkpoint: CheckpointInfo | None) -> dict[str, Any] | None:
    """What to pass for a speculators checkpoint: vLLM builds the config from the checkpoint and
    merges the engine's over it, so only what had to change (the token cap), else nothing."""
    tokens = config.get("num_speculative_tokens")
    if checkpoint is None or tokens == checkpoint.speculators_tokens:
        return None
    return {"num_speculative_tokens": tokens}


def _with_schedule(config: dict[str, Any], kaito: KaitoRequest, engine: EngineRequest,
                   caps: PlatformCapabilities, notes: list[str]) -> dict[str, Any]:
    """The plugin's own choice with a load-aware schedule, only where vLLM keeps it as is."""
    method, tokens = config.get("method"), config.get("num_speculative_tokens")
    if method == ADAPTIVE_FALLBACK["method"]:
        notes.append("no per-batch-size schedule: the adaptive proposer sizes each row's draft "
                     "from its acceptance and the measured step cost")
        if caps.v2_methods and method not in caps.v2_methods:
            # vLLM 0.33: _get_v2_model_runner_unsupported_features lists custom_class
            # (vllm/config/vllm.py:3067), so it keeps the V1 runner.
            notes.append(f"{method} runs on vLLM's V1 model runner here (Model Runner V2 does "
                         "not support it): async scheduling off, decode on PIECEWISE graphs; "
                         "KAITO's ngram, the default fallback, runs on Model Runner V2")
        return config
    if not kaito.schedule:
        notes.append("static config: the load-aware schedule is off (VLLM_SPECDEC_SCHEDULE=off)")
        return config
    if not caps.batch_schedule:
        notes.append(f"static config: {engine_name(caps)} has no "
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
    schedule = load_aware_schedule(method, tokens, engine.max_num_seqs, caps.platform)
    graphs = ("; on CUDA graphs vLLM captures decode graphs for each distinct k (more capture "
              "time and graph memory)" if method in caps.v2_methods else "")
    notes.append(
        "load-aware schedule (batch size -> speculative tokens): "
        + ", ".join(f"{a}-{b}: {k}" for a, b, k in schedule) + graphs
        + f" (break points: {break_points(caps.platform, method).evidence})")
    return {**config, "num_speculative_tokens_per_batch_size": schedule}


def _automatic_choice(
    kaito: KaitoRequest, engine: EngineRequest, caps: PlatformCapabilities,
    presets: PresetTable, candidates: tuple[str | None, ...], errors: list[str],
    warnings: list[str],
) -> tuple[Source, dict[str, Any], str | None]:
    """The opted-in choice when the user set no config, best first."""
    target = engine.checkpoint
    preset = next(name for name in candidates if name)
    if target is not None and target.speculators:
        # vLLM builds the config from the checkpoint itself; checked here like any other.
        config = {"method": target.speculators_method, "model": target.path,
                  "num_speculative_tokens": target.speculators_tokens}
        return SOURCE_SPECULATORS, {k: v for k, v in config.items() if v is not None}, preset
    match = _tuned_preset(kaito, engine, presets, warnings)
    if match is not None:
        tuned, matched = match
        config = dict(tuned.speculative_config)
        missing = _missing_target_layers(config, target) or _unserved(config, engine, caps)
        if missing is None:
            return SOURCE_TUNED, config, matched
        warnings.append(f"tuned preset {tuned.name!r} (matched by {quote_value(matched)}) "
                        f"{missing}: using the next choice instead")
    if target is not None and target.mtp_layers > 0:
        mtp = {"method": "mtp", "num_speculative_tokens": 1}
        unserved = _unserved(mtp, engine, caps)
        if unserved is None:
            return SOURCE_CHECKPOINT_MTP, mtp, preset
        warnings.append(f"the target's own MTP layers are not used: the plugin's choice "
                        f"{unserved}; using the next choice instead")
    if kaito.draft is not None and kaito.draft.draft_method is not None:
        draft = kaito.draft
        spec = method_spec(draft.draft_method)
        tokens = (spec.default_tokens if spec is not None else None) or 1
        if draft.draft_method == "medusa" and draft.num_heads:
            tokens = min(tokens, draft.num_heads)
        return SOURCE_DRAFT, {"method": draft.draft_method, "model": draft.path,
                              "num_speculative_tokens": tokens}, preset
    fallback = FALLBACKS.get(kaito.fallback)
    if fallback is None:
        errors.append(f"VLLM_SPECDEC_FALLBACK={quote_value(kaito.fallback)} is not a draft-free "
                      f"fallback; use one of {', '.join(FALLBACK_NAMES)}")
        fallback = FALLBACKS[FALLBACK_NAMES[0]]
    method = fallback.config["method"]
    if method not in caps.methods:
        others = " or ".join(name for name in FALLBACK_NAMES if name != fallback.name)
        errors.append(f"VLLM_SPECDEC_FALLBACK={fallback.name} needs vLLM's {method} speculative "
                      f"method, which {engine_name(caps)} does not run; use "
                      f"VLLM_SPECDEC_FALLBACK={others}")
    return fallback.source, dict(fallback.config), preset


def _tuned_preset(kaito: KaitoRequest, engine: EngineRequest, presets: PresetTable,
                  warnings: list[str]) -> tuple[TunedPreset, str] | None:
    """The tuned preset for this engine, decided from the model first, as KAITO decides.

    KAITO_PRESET_NAME first (KAITO's own preset), then --model, then --served-model-name. A
    served name is only a name: when --model is a Hugging Face repo id (no local checkpoint)
    and the served name would pick another preset than the model does, the model decides,
    with a warning; the served name picks the preset only for a local checkpoint, or with no
    --model at all.
    """
    if kaito.preset:
        match = presets.find([kaito.preset])
        if match is not None:
            return match
    by_model = presets.find([engine.model])
    by_name = presets.find(engine.served_model_names)
    if by_name is None or (by_model is not None and by_model[0] is by_name[0]):
        return by_model or by_name
    if engine.model and _is_hub_id(engine.model, engine.checkpoint):
        chosen = (f"its preset {by_model[0].name!r}" if by_model is not None
                  else "no tuned preset (the draft-free choice)")
        warnings.append(
            f"--served-model-name {quote_value(by_name[1])} names the tuned preset "
            f"{by_name[0].name!r}, but --model {quote_value(engine.model)} is another model: "
            f"the model decides ({chosen}); set KAITO_PRESET_NAME to choose a preset yourself")
        return by_model
    return by_model or by_name


def _is_hub_id(model: str, checkpoint: CheckpointInfo | None) -> bool:
    """A Hugging Face repo id (`org/name` or `name`), not a local checkpoint."""
    return checkpoint is None and not model.startswith(("/", ".", "~")) and model.count("/") <= 1


def _unserved(config: Mapping[str, Any], engine: EngineRequest,
              caps: PlatformCapabilities) -> str | None:
    """Why the plugin's own choice cannot run on this target: its method needs vLLM's own
    implementation of the target, which vLLM does not have (only its Transformers backend)."""
    method = config.get("method")
    if caps.vllm_serves_target is not False or not needs_native_target(method):
        return None
    return (f"runs {method!r} on layers of vLLM's own implementation of the target, but "
            f"{engine_name(caps)} has none for {unserved_target(engine)}")


def _missing_target_layers(config: Mapping[str, Any],
                           target: CheckpointInfo | None) -> str | None:
    """Why a tuned config cannot run on this local target: an MTP config (no `model`: the
    target's own layers) for a checkpoint whose config.json declares no MTP layers."""
    spec = method_spec(config.get("method"))
    if (spec is None or spec.proposer != "target-layers" or config.get("model")
            or target is None or target.mtp_layers > 0):
        return None
    return (f"runs {spec.name!r} on the target's own MTP layers, but the local checkpoint "
            f"{quote_value(target.path)} declares none in its config.json")

"""Gather the decision's inputs from env, files and engine arguments, and decide.

Shared by the engine hook and the explain CLI so both always reach the same decision. The
opt-in is read first and alone: when it is absent or "false" nothing else is read, so no other
input (a broken presets or config file) can affect an engine that did not opt in.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from vllm_specdec_plugin.capabilities import capabilities_for, pipeline_refusals
from vllm_specdec_plugin.checkpoint import CheckpointInfo, inspect_checkpoint, inspect_draft
from vllm_specdec_plugin.decision import (
    SOURCE_OFF,
    Decision,
    EngineRequest,
    KaitoRequest,
    PlatformCapabilities,
    decide,
)
from vllm_specdec_plugin.errors import SpecDecodeConfigError, quote_value
from vllm_specdec_plugin.inputs import (
    ANNOTATION_KEY,
    RUNTIME_KEY,
    Annotation,
    load_inference_config,
    read_annotation,
)
from vllm_specdec_plugin.presets import PresetTable, load_preset_table
from vllm_specdec_plugin.settings import (
    ENV_ANNOTATION,
    ENV_DRAFT_MODEL,
    ENV_FALLBACK,
    ENV_PRESET_NAME,
    ENV_RUNTIME,
    ENV_SCHEDULE,
    check_settings,
    setting_value,
)


def read_opt_in(environ: Mapping[str, str]) -> Annotation:
    """The opt-in annotation, from env or the downward-API file."""
    return read_annotation(environ, ANNOTATION_KEY, ENV_ANNOTATION)


def is_opted_in(annotation: Annotation) -> bool:
    """Anything but absent or "false": an invalid value counts too, so that it gets its error."""
    return annotation.value is not None and annotation.value != "false"


def resolve(
    environ: Mapping[str, str],
    engine: EngineRequest,
    platform: str,
    *,
    annotation: Annotation | None = None,
    caps: PlatformCapabilities | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> Decision:
    """The decision for one engine start; input errors come back in `Decision.errors`.

    `overrides` replaces fields of the KaitoRequest read from env/files (the CLI's flags).
    """
    overrides = dict(overrides or {})
    try:
        if annotation is None:
            annotation = overrides.pop("annotation", None) or read_opt_in(environ)
        else:
            overrides.pop("annotation", None)
        caps = caps or capabilities_for(platform)
        if not is_opted_in(annotation):
            return decide(KaitoRequest(annotation), engine, caps, PresetTable())
        if annotation.value == "true":  # a bad annotation gets its own error first (decide)
            check_settings(environ)
        if engine.checkpoint is None:
            engine = replace(engine, checkpoint=inspect_checkpoint(engine.model))
        if engine.pipeline_parallel_size > 1 and engine.checkpoint is not None:
            caps = replace(caps, pipeline_refusals=pipeline_refusals(
                engine.checkpoint.architectures, caps.v2_methods))
        kaito = read_kaito_request(environ, annotation, engine.checkpoint)
        if overrides:
            kaito = replace(kaito, **overrides)
        return _check_draft_path(decide(kaito, engine, caps, load_preset_table(environ)))
    except SpecDecodeConfigError as exc:
        return Decision(False, SOURCE_OFF, platform=platform, errors=(exc.message,))


def _check_draft_path(decision: Decision) -> Decision:
    """A draft `model` given as a local path must exist (vLLM would try the hub instead)."""
    draft = (decision.speculative_config or {}).get("model")
    if not isinstance(draft, str) or not draft.startswith(("/", "./", "../", "~")):
        return decision
    if Path(draft).expanduser().exists():
        return decision
    return replace(decision, enabled=False, errors=(
        f"the draft model {quote_value(draft)} (speculative-config from {decision.source}) "
        "does not exist; mount the draft checkpoint there or fix the path",))


def read_kaito_request(environ: Mapping[str, str], annotation: Annotation,
                       target: CheckpointInfo | None = None) -> KaitoRequest:
    """Everything an opted-in engine is told: runtime, preset, inference config, draft."""
    config = load_inference_config(environ)
    draft_path = environ.get(ENV_DRAFT_MODEL)
    return KaitoRequest(
        draft=inspect_draft(draft_path, target) if draft_path else None,
        fallback=setting_value(environ, ENV_FALLBACK),
        schedule=setting_value(environ, ENV_SCHEDULE) == "on",
        annotation=annotation,
        runtime=read_annotation(environ, RUNTIME_KEY, ENV_RUNTIME),
        preset=environ.get(ENV_PRESET_NAME) or None,
        config_speculative_config=config.speculative_config,
        config_path=config.path,
    )

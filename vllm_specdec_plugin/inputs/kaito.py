"""Everything KAITO and the operator tell an opted-in engine, read from env and files."""

from __future__ import annotations

from collections.abc import Mapping

from vllm_specdec_plugin.core.settings import (
    ENV_DRAFT_MODEL,
    ENV_FALLBACK,
    ENV_PRESET_NAME,
    ENV_RUNTIME,
    ENV_SCHEDULE,
    RUNTIME_KEY,
    setting_value,
)
from vllm_specdec_plugin.core.types import Annotation, CheckpointInfo, KaitoRequest
from vllm_specdec_plugin.inputs.annotations import read_annotation
from vllm_specdec_plugin.inputs.checkpoint import inspect_draft
from vllm_specdec_plugin.inputs.inference_config import load_inference_config


def read_kaito_request(environ: Mapping[str, str], annotation: Annotation,
                       target: CheckpointInfo | None = None) -> KaitoRequest:
    """Everything an opted-in engine is told: runtime, preset, inference config, draft."""
    config = load_inference_config(environ)
    draft_path = environ.get(ENV_DRAFT_MODEL)
    fallback = setting_value(environ, ENV_FALLBACK)
    return KaitoRequest(
        draft=inspect_draft(draft_path, target) if draft_path else None,
        fallback=fallback,  # type: ignore[arg-type]  # checked up front (check_settings)
        schedule=setting_value(environ, ENV_SCHEDULE) in ("on", "static"),
        schedule_control=setting_value(environ, ENV_SCHEDULE) == "on",
        annotation=annotation,
        runtime=read_annotation(environ, RUNTIME_KEY, ENV_RUNTIME),
        preset=environ.get(ENV_PRESET_NAME) or None,
        config_speculative_config=config.speculative_config,
        config_path=config.path,
    )

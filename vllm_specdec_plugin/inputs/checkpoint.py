"""What a local checkpoint's config.json says about speculative decoding (no hub access)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from vllm_specdec_plugin.core.errors import SpecDecodeConfigError, quote_value
from vllm_specdec_plugin.core.methods import draft_method_of
from vllm_specdec_plugin.core.types import CheckpointInfo

# config.json keys by which targets declare their own MTP layers (DeepSeek-V3/MiMo/GLM,
# Qwen3-Next/Qwen3.5, ...).
MTP_LAYER_KEYS = ("num_nextn_predict_layers", "mtp_num_hidden_layers", "num_mtp_layers")
# speculators_model_type values vLLM renames (vLLM 0.33 SpeculatorsConfig).
SPECULATORS_METHODS = {"peagle": "eagle3", "dflash2": "dflash"}


def read_config(path: str) -> dict[str, Any] | None:
    """config.json of a local checkpoint directory; None for hub ids and non-directories."""
    config = Path(path).expanduser() / "config.json"
    if not config.is_file():
        return None
    try:
        data = json.loads(config.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise SpecDecodeConfigError(f"{config} cannot be read as JSON ({exc}); fix the "
                                    "checkpoint") from None
    return data if isinstance(data, dict) else None


def inspect_checkpoint(path: str | None) -> CheckpointInfo | None:
    if not path:
        return None
    config = read_config(path)
    if config is None:
        return None
    nested = config.get("text_config")
    text: dict[str, Any] = nested if isinstance(nested, dict) else config
    mtp = max((int(text.get(key) or 0) for key in MTP_LAYER_KEYS
               if isinstance(text.get(key), int)), default=0)
    architectures = " ".join(config.get("architectures") or []).lower()
    spec_method, spec_tokens = _speculators_config(config)
    method = draft_method_of(architectures)
    return CheckpointInfo(
        path=path,
        speculators=config.get("speculators_config") is not None,
        mtp_layers=mtp,
        draft_method=method,
        vocab_size=text.get("vocab_size"),
        hidden_size=text.get("target_hidden_size") or text.get("hidden_size"),
        num_heads=config.get("medusa_num_heads") or config.get("num_heads"),
        speculators_method=spec_method,
        speculators_tokens=spec_tokens,
        architectures=tuple(str(a) for a in config.get("architectures") or ()),
    )


def _speculators_config(config: dict[str, Any]) -> tuple[str | None, int | None]:
    """(method, tokens) as vLLM's SpeculatorsConfig.build_vllm_speculative_config reads them."""
    speculators = config.get("speculators_config")
    if not isinstance(speculators, dict):
        return None, None
    methods = speculators.get("proposal_methods")
    first = methods[0] if isinstance(methods, list) and methods else {}
    tokens = first.get("speculative_tokens") if isinstance(first, dict) else None
    method = config.get("speculators_model_type")
    method = SPECULATORS_METHODS.get(method, method) if isinstance(method, str) else None
    return method, tokens if isinstance(tokens, int) else None


def inspect_draft(path: str, target: CheckpointInfo | None) -> CheckpointInfo:
    """A draft named by VLLM_SPECDEC_DRAFT_MODEL: it must exist and match the target."""
    draft = inspect_checkpoint(path)
    if draft is None:
        raise SpecDecodeConfigError(
            f"VLLM_SPECDEC_DRAFT_MODEL={quote_value(path)} is not a checkpoint directory with a "
            "config.json; point it at a local EAGLE, EAGLE-3 or Medusa draft, or unset it")
    if draft.draft_method is None:
        raise SpecDecodeConfigError(
            f"VLLM_SPECDEC_DRAFT_MODEL={quote_value(path)}: its architectures name no EAGLE, "
            "EAGLE-3 or Medusa draft; pass the method yourself in --speculative-config")
    if target is not None and draft.vocab_size and target.vocab_size and (
            draft.vocab_size != target.vocab_size):
        raise SpecDecodeConfigError(
            f"draft {path} has vocab_size {draft.vocab_size} but the target has "
            f"{target.vocab_size}; use a draft trained for this target")
    if target is not None and draft.hidden_size and target.hidden_size and (
            draft.hidden_size != target.hidden_size):
        raise SpecDecodeConfigError(
            f"draft {path} has hidden size {draft.hidden_size} but the target has "
            f"{target.hidden_size}; use a draft trained for this target")
    return draft

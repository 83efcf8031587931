"""What a local checkpoint's config.json says about speculative decoding (no hub access)."""

from __future__ import annotations

from typing import Any

from vllm_specdec_plugin.core.errors import SpecDecodeConfigError, quote_value
from vllm_specdec_plugin.core.limits import MAX_CHECKPOINT_CONFIG_BYTES, decode_text
from vllm_specdec_plugin.core.methods import draft_method_of
from vllm_specdec_plugin.core.settings import ENV_DRAFT_MODEL
from vllm_specdec_plugin.core.types import CheckpointInfo
from vllm_specdec_plugin.inputs.files import local_path, read_bounded
from vllm_specdec_plugin.inputs.parsers import load_json

# config.json keys by which targets declare their own MTP layers (DeepSeek-V3/MiMo/GLM,
# Qwen3-Next/Qwen3.5, ...).
MTP_LAYER_KEYS = ("num_nextn_predict_layers", "mtp_num_hidden_layers", "num_mtp_layers")
# speculators_model_type values vLLM renames (vLLM 0.33 SpeculatorsConfig).
SPECULATORS_METHODS = {"peagle": "eagle3", "dflash2": "dflash"}


def read_config(path: str, what: str = "--model") -> dict[str, Any] | None:
    """config.json of a local checkpoint directory; None for hub ids and non-directories.

    Read bounded (size, strict UTF-8, the bounded JSON parser); a path that cannot name
    anything (too long, `~unknownuser`) is refused naming `what`.
    """
    directory = local_path(path, what)
    if directory is None:
        return None
    config = directory / "config.json"
    try:
        if not config.is_file():
            return None
        data = read_bounded(config, MAX_CHECKPOINT_CONFIG_BYTES)
    except OSError as exc:
        raise SpecDecodeConfigError(
            f"{config} cannot be read ({exc.strerror or exc}); fix the checkpoint (its "
            f"config.json is at most {MAX_CHECKPOINT_CONFIG_BYTES} bytes)") from None
    text = decode_text(data, str(config), "fix the checkpoint")
    document = load_json(text, str(config), "fix the checkpoint",
                         limit=MAX_CHECKPOINT_CONFIG_BYTES)
    return document if isinstance(document, dict) else None


def inspect_checkpoint(path: str | None, what: str = "--model") -> CheckpointInfo | None:
    if not path:
        return None
    config = read_config(path, what)
    if config is None:
        return None
    where = f"{path}/config.json"
    nested = config.get("text_config")
    text: dict[str, Any] = nested if isinstance(nested, dict) else config
    mtp = max((_count(text, key, where) or 0 for key in MTP_LAYER_KEYS), default=0)
    architectures = _strings(config, "architectures", where)
    spec_method, spec_tokens = _speculators_config(config, where)
    method = draft_method_of(" ".join(architectures).lower())
    return CheckpointInfo(
        path=path,
        speculators=config.get("speculators_config") is not None,
        mtp_layers=mtp,
        draft_method=method,
        vocab_size=_size(text, "vocab_size"),
        hidden_size=_size(text, "target_hidden_size") or _size(text, "hidden_size"),
        # Medusa heads cap a Medusa draft's tokens; other checkpoints' num_heads mean nothing here.
        num_heads=(_count(config, "medusa_num_heads", where) or _count(config, "num_heads", where)
                   if method == "medusa" else None),
        speculators_method=spec_method,
        speculators_tokens=spec_tokens,
        architectures=architectures,
    )


def _refuse_type(where: str, key: str, expected: str, value: object) -> SpecDecodeConfigError:
    return SpecDecodeConfigError(
        f"{where}: {key} must be {expected}, got {type(value).__name__} {quote_value(value)}; "
        "fix the checkpoint's config.json")


def _count(config: dict[str, Any], key: str, where: str) -> int | None:
    """A count field: a non-negative integer or absent (null); anything else is refused."""
    value = config.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise _refuse_type(where, key, "a non-negative integer", value)
    return value


def _size(config: dict[str, Any], key: str) -> int | None:
    """A size that only guards a draft/target comparison: ignored unless a positive integer
    (the comparison is then skipped, as when the key is absent)."""
    value = config.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _strings(config: dict[str, Any], key: str, where: str) -> tuple[str, ...]:
    value = config.get(key)
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise _refuse_type(where, key, "a list of strings", value)
    return tuple(value)


def _speculators_config(config: dict[str, Any], where: str) -> tuple[str | None, int | None]:
    """(method, tokens) as vLLM's SpeculatorsConfig.build_vllm_speculative_config reads them."""
    speculators = config.get("speculators_config")
    if speculators is None:
        return None, None
    if not isinstance(speculators, dict):
        raise _refuse_type(where, "speculators_config", "a mapping", speculators)
    methods = speculators.get("proposal_methods")
    if methods is not None and not isinstance(methods, list):
        raise _refuse_type(where, "speculators_config.proposal_methods", "a list", methods)
    first = methods[0] if methods else {}
    if not isinstance(first, dict):
        raise _refuse_type(where, "speculators_config.proposal_methods[0]", "a mapping", first)
    tokens = _count(first, "speculative_tokens", where)
    method = config.get("speculators_model_type")
    if method is not None and not isinstance(method, str):
        raise _refuse_type(where, "speculators_model_type", "a string", method)
    return (SPECULATORS_METHODS.get(method, method) if method is not None else None), tokens


def inspect_draft(path: str, target: CheckpointInfo | None) -> CheckpointInfo:
    """A draft named by VLLM_SPECDEC_DRAFT_MODEL: it must exist and match the target."""
    draft = inspect_checkpoint(path, ENV_DRAFT_MODEL)
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

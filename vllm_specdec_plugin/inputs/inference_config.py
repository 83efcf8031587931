"""KAITO's inference_config.yaml (its `vllm:` section) and the user's speculative config."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from vllm_specdec_plugin.core.errors import SpecDecodeConfigError, quote_value
from vllm_specdec_plugin.core.limits import MAX_CONFIG_BYTES
from vllm_specdec_plugin.core.settings import ENV_INFERENCE_CONFIG
from vllm_specdec_plugin.inputs.files import read_input_file
from vllm_specdec_plugin.inputs.parsers import check_plain, load_json, load_yaml

DEFAULT_INFERENCE_CONFIG = "/mnt/config/inference_config.yaml"
SPECULATIVE_CONFIG_KEYS = ("speculative-config", "speculative_config")


@dataclass(frozen=True)
class InferenceConfig:
    """The `vllm:` section of KAITO's inference_config.yaml."""

    path: str
    vllm: Mapping[str, Any] = field(default_factory=dict)
    speculative_config: Mapping[str, Any] | None = None


def load_inference_config(environ: Mapping[str, str]) -> InferenceConfig:
    """The `vllm:` section of KAITO's inference config (empty when the file is absent)."""
    text, path = read_input_file(environ, ENV_INFERENCE_CONFIG, DEFAULT_INFERENCE_CONFIG,
                                 MAX_CONFIG_BYTES, "the inference ConfigMap's YAML file")
    return InferenceConfig(path) if text is None else parse_inference_config(text, path)


def parse_inference_config(text: str, path: str) -> InferenceConfig:
    """Parse inference_config.yaml text (safe_load only) into its `vllm:` section."""
    document = load_yaml(text, f"inference config {path}",
                         "fix the ConfigMap's inference_config.yaml")
    if document is None:
        return InferenceConfig(path)
    if not isinstance(document, dict):
        raise SpecDecodeConfigError(
            f"inference config {path} must be a YAML mapping with a `vllm:` section, "
            f"got a {type(document).__name__}"
        )
    section = document.get("vllm")
    if section is None:
        return InferenceConfig(path)
    if not isinstance(section, dict):
        raise SpecDecodeConfigError(
            f"`vllm:` in inference config {path} must be a mapping of vLLM flags, "
            f"got a {type(section).__name__}"
        )
    present = [key for key in SPECULATIVE_CONFIG_KEYS if key in section]
    if len(present) > 1:
        raise SpecDecodeConfigError(
            f"inference config {path} sets both vllm.speculative-config and "
            "vllm.speculative_config; keep one"
        )
    spec = None
    if present:
        spec = parse_speculative_config(section[present[0]], f"vllm.{present[0]} in {path}")
    return InferenceConfig(path, section, spec)


SPECULATIVE_CONFIG_FIX = ('write it as a JSON object such as '
                          '\'{"method":"ngram","num_speculative_tokens":5}\'')


def parse_speculative_config(value: object, source: str) -> dict[str, Any]:
    """A user's speculative config: a JSON object string or a mapping, keys normalised to `_`.

    Text goes through the bounded JSON parser (`inputs/parsers.py`); a mapping (from vLLM's own
    parser, `LLM(speculative_config=...)` or YAML) is checked against the same bounds.
    """
    if isinstance(value, str):
        value = load_json(value, source, SPECULATIVE_CONFIG_FIX)
    if not isinstance(value, dict):
        raise SpecDecodeConfigError(
            f"{source} must be a JSON object (a mapping of speculative-config keys), got "
            f"{type(value).__name__} {quote_value(value)}"
        )
    check_plain(value, source, SPECULATIVE_CONFIG_FIX)
    normalised: dict[str, Any] = {}
    for key, item in value.items():
        name = str(key).replace("-", "_")
        if name in normalised:
            raise SpecDecodeConfigError(
                f"{source} sets {name} twice (as {quote_value(name)} and {quote_value(str(key))}); "
                "keep one")
        normalised[name] = item
    return normalised

"""Reading KAITO's inputs: the annotations (env or downward-API file) and inference_config.yaml.

Thin adapters over files and env; every parser raises `SpecDecodeConfigError` naming the input,
the bad value and the fix. Nothing here decides anything.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from vllm_specdec_plugin.errors import SpecDecodeConfigError, quote_value
from vllm_specdec_plugin.settings import (  # noqa: F401 - the names other modules import here
    ENV_ANNOTATION,
    ENV_ANNOTATIONS_FILE,
    ENV_INFERENCE_CONFIG,
    ENV_PRESET_NAME,
    ENV_RUNTIME,
)

ANNOTATION_KEY = "kaito.sh/enable-speculative-decoding"
RUNTIME_KEY = "kaito.sh/runtime"

DEFAULT_ANNOTATIONS_FILE = "/etc/podinfo/annotations"
DEFAULT_INFERENCE_CONFIG = "/mnt/config/inference_config.yaml"

# Kubernetes caps all annotations of an object at 256 KiB; a ConfigMap at 1 MiB.
MAX_ANNOTATIONS_BYTES = 256 * 1024
MAX_CONFIG_BYTES = 1024 * 1024
# The user's presets file: a table of presets, at most a ConfigMap's size like the config.
MAX_PRESETS_BYTES = 1024 * 1024

SPECULATIVE_CONFIG_KEYS = ("speculative-config", "speculative_config")


@dataclass(frozen=True)
class Annotation:
    """One annotation value and where it was read (for messages)."""

    value: str | None
    source: str


@dataclass(frozen=True)
class InferenceConfig:
    """The `vllm:` section of KAITO's inference_config.yaml."""

    path: str
    vllm: Mapping[str, Any] = field(default_factory=dict)
    speculative_config: Mapping[str, Any] | None = None


# --- the downward-API annotations file -------------------------------------------------------

_GO_SIMPLE_ESCAPES = {
    "a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v",
    "\\": "\\", '"': '"', "'": "'",
}


def unquote_go(quoted: str) -> str:
    """Undo Go's `strconv.Quote`, which the kubelet uses for downward-API values."""
    if len(quoted) < 2 or quoted[0] != '"' or quoted[-1] != '"':
        raise ValueError("value is not a double-quoted string")
    body, out, i = quoted[1:-1], [], 0
    raw_bytes = bytearray()

    def flush_bytes() -> None:
        if raw_bytes:
            out.append(raw_bytes.decode("utf-8", "replace"))
            raw_bytes.clear()

    while i < len(body):
        ch = body[i]
        if ch == '"':
            raise ValueError("unescaped double quote inside the value")
        if ch != "\\":
            flush_bytes()
            out.append(ch)
            i += 1
            continue
        if i + 1 >= len(body):
            raise ValueError("value ends with a lone backslash")
        esc = body[i + 1]
        if esc in _GO_SIMPLE_ESCAPES:
            flush_bytes()
            out.append(_GO_SIMPLE_ESCAPES[esc])
            i += 2
        elif esc == "x":
            raw_bytes.append(int(_hex(body, i + 2, 2), 16))
            i += 4
        elif esc in "uU":
            width = 4 if esc == "u" else 8
            flush_bytes()
            out.append(chr(int(_hex(body, i + 2, width), 16)))
            i += 2 + width
        elif esc in "01234567":
            raw_bytes.append(int(body[i + 1 : i + 4], 8))
            i += 4
        else:
            raise ValueError(f"unknown escape \\{esc}")
    flush_bytes()
    return "".join(out)


def _hex(body: str, start: int, width: int) -> str:
    digits = body[start : start + width]
    if len(digits) != width or any(c not in "0123456789abcdefABCDEF" for c in digits):
        raise ValueError(f"bad hex escape {digits!r}")
    return digits


def parse_annotations(text: str, source: str, keys: tuple[str, ...]) -> dict[str, str]:
    """Parse the kubelet's `key="value"` lines, keeping only `keys`.

    Lines of other annotations are never an error: the pod's other annotations are written by
    many hands and are none of this plugin's business. A malformed or conflicting line for one
    of `keys` is an error naming the file and line.
    """
    found: dict[str, tuple[str, int]] = {}
    for lineno, line in enumerate(text.splitlines(), start=1):
        key, sep, quoted = line.partition("=")
        key = key.strip()
        if key not in keys:
            continue
        where = f"{source}:{lineno}"
        if not sep:
            raise SpecDecodeConfigError(
                f"annotation {key} in {where} has no value: expected {key}=\"true\" or "
                f"{key}=\"false\" (the kubelet's downward-API format)"
            )
        try:
            value = unquote_go(quoted.strip())
        except ValueError as exc:
            raise SpecDecodeConfigError(
                f"annotation {key} in {where} is not a valid downward-API value ({exc}): "
                f"{quote_value(quoted.strip())}; write it as {key}=\"true\""
            ) from None
        if key in found and found[key][0] != value:
            raise SpecDecodeConfigError(
                f"annotation {key} appears twice in {source} (lines {found[key][1]} and "
                f"{lineno}) with different values {quote_value(found[key][0])} and "
                f"{quote_value(value)}; keep one"
            )
        found[key] = (value, lineno)
    return {key: value for key, (value, _) in found.items()}


def read_annotations_file(environ: Mapping[str, str]) -> tuple[dict[str, str], str]:
    """The plugin's annotations from the downward-API file, and the file's path.

    A missing or unreadable default file means "no annotations". A file named explicitly
    through `KAITO_ANNOTATIONS_FILE` that cannot be read is an error: someone meant it.
    """
    text, path = read_input_file(environ, ENV_ANNOTATIONS_FILE, DEFAULT_ANNOTATIONS_FILE,
                                 MAX_ANNOTATIONS_BYTES, "the downward-API annotations file",
                                 unreadable_default_ok=True)
    if text is None:
        return {}, path
    return parse_annotations(text, path, (ANNOTATION_KEY, RUNTIME_KEY)), path


def read_input_file(environ: Mapping[str, str], env_name: str, default: str, limit: int,
                    what: str, unreadable_default_ok: bool = False) -> tuple[str | None, str]:
    """Text of the file named by `env_name` (else `default`), and its path.

    None when the default file is absent (or unreadable, if allowed); a file named explicitly
    must exist and be readable.
    """
    explicit = environ.get(env_name)
    path = explicit or default
    try:
        return _read_text(Path(path), limit), path
    except FileNotFoundError:
        if explicit:
            raise SpecDecodeConfigError(
                f"{env_name}={quote_value(path)} does not exist; mount {what} there or unset "
                "the variable") from None
        return None, path
    except OSError as exc:
        if unreadable_default_ok and not explicit:
            return None, path
        raise SpecDecodeConfigError(
            f"{env_name}={quote_value(path)} cannot be read ({exc.strerror or exc}); point it "
            f"at {what} (at most {limit} bytes)") from None


def load_yaml(text: str, source: str, fix: str) -> Any:
    """`yaml.safe_load`, with errors that name the file, the line and the fix."""
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{source}:{mark.line + 1}" if mark is not None else source
        problem = getattr(exc, "problem", None) or type(exc).__name__
        raise SpecDecodeConfigError(f"{where} is not valid YAML ({problem}); {fix}") from None


def _read_text(path: Path, limit: int) -> str:
    if path.is_dir():
        raise IsADirectoryError(21, "is a directory", str(path))
    with path.open("rb") as handle:
        data = handle.read(limit + 1)
    if len(data) > limit:
        raise OSError(27, f"larger than {limit} bytes", str(path))
    return data.decode("utf-8", "replace")


def read_annotation(environ: Mapping[str, str], key: str, env_name: str) -> Annotation:
    """One annotation: its env variable (a downward-API fieldRef) wins over the file."""
    if env_name in environ:
        return Annotation(environ[env_name], f"env {env_name}")
    annotations, path = read_annotations_file(environ)
    return Annotation(annotations.get(key), f"annotations file {path}")


# --- inference_config.yaml -------------------------------------------------------------------


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


def parse_speculative_config(value: object, source: str) -> dict[str, Any]:
    """A user's speculative config: a JSON object string or a mapping, keys normalised to `_`."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            raise SpecDecodeConfigError(
                f"{source} is not valid JSON ({exc.msg} at char {exc.pos}): "
                f"{quote_value(value)}; write it as a JSON object such as "
                '\'{"method":"ngram","num_speculative_tokens":5}\''
            ) from None
    if not isinstance(value, dict):
        raise SpecDecodeConfigError(
            f"{source} must be a JSON object (a mapping of speculative-config keys), got "
            f"{type(value).__name__} {quote_value(value)}"
        )
    normalised: dict[str, Any] = {}
    for key, item in value.items():
        name = str(key).replace("-", "_")
        if name in normalised:
            raise SpecDecodeConfigError(
                f"{source} sets {name} twice (as {name!r} and {str(key)!r}); keep one")
        normalised[name] = item
    return normalised

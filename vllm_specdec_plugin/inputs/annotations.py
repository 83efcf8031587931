"""The KAITO annotations: a downward-API env variable, else the downward-API annotations file.

The opt-in is read here and nowhere else (`read_opt_in`); `core.types.Annotation.opt_in` says
what the value means.
"""

from __future__ import annotations

import errno
import logging
import os
from collections.abc import Mapping

from vllm_specdec_plugin.core.errors import SpecDecodeConfigError, quote_value
from vllm_specdec_plugin.core.limits import MAX_ANNOTATIONS_BYTES
from vllm_specdec_plugin.core.settings import (
    ANNOTATION_KEY,
    ENV_ANNOTATION,
    ENV_ANNOTATIONS_FILE,
    RUNTIME_KEY,
)
from vllm_specdec_plugin.core.types import Annotation
from vllm_specdec_plugin.inputs.files import read_input_file

DEFAULT_ANNOTATIONS_FILE = "/etc/podinfo/annotations"
# The plugin's logger (`engine/patching.py`), named here without importing vLLM.
_logger = logging.getLogger("vllm.specdec_plugin")
_said_oversized: set[tuple[str, str]] = set()

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
    of `keys`, or one holding bytes that are not UTF-8 (the file is read with
    `surrogateescape`), is an error naming the file and line.
    """
    found: dict[str, tuple[str, int]] = {}
    for lineno, line in enumerate(text.splitlines(), start=1):
        key, sep, quoted = line.partition("=")
        key = key.strip()
        if key not in keys:
            continue
        where = f"{source}:{lineno}"
        bad = next((i for i, ch in enumerate(line) if "\udc80" <= ch <= "\udcff"), None)
        if bad is not None:  # bytes that are not UTF-8 (read with surrogateescape)
            raise SpecDecodeConfigError(
                f"annotation {key} in {where} is not UTF-8 text (byte "
                f"0x{ord(line[bad]) - 0xdc00:02x} at column {bad + 1}); the kubelet writes "
                f"UTF-8: write it as {key}=\"true\"")
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

    A missing or unreadable default file means "no annotations", except one larger than
    `MAX_ANNOTATIONS_BYTES`: that raises OSError `EFBIG` (`read_annotation` says so). A file
    named explicitly through `KAITO_ANNOTATIONS_FILE` that cannot be read is an error: someone
    meant it.
    """
    text, path = read_input_file(environ, ENV_ANNOTATIONS_FILE, DEFAULT_ANNOTATIONS_FILE,
                                 MAX_ANNOTATIONS_BYTES, "the downward-API annotations file",
                                 unreadable_default_ok=True, strict_utf8=False)
    if text is None:
        return {}, path
    return parse_annotations(text, path, (ANNOTATION_KEY, RUNTIME_KEY)), path


def read_annotation(environ: Mapping[str, str], key: str, env_name: str) -> Annotation:
    """One annotation: its env variable (a downward-API fieldRef) wins over the file.

    An empty env value means "not set": Kubernetes sets a `fieldRef` env variable to "" when
    the pod lacks the annotation, so the file decides (where an absent key means off). An
    empty value written in the file itself is a value, refused as KAITO refuses it.
    """
    if environ.get(env_name):
        return Annotation(environ[env_name], f"env {env_name}")
    try:
        annotations, path = read_annotations_file(environ)
    except OSError as exc:  # the default file, larger than the bound: read as unset
        if exc.errno != errno.EFBIG:
            raise
        _say_oversized(str(exc.filename), key, env_name)
        return Annotation(None, f"annotations file {exc.filename} (too large, not read)")
    return Annotation(annotations.get(key), f"annotations file {path}")


def _say_oversized(path: str, key: str, env_name: str) -> None:
    """One WARNING per file and key in a process: an oversized file is a broken input (the
    kubelet writes at most what Kubernetes allows), not a pod that did not opt in."""
    if (path, key) in _said_oversized:
        return
    _said_oversized.add((path, key))
    try:
        size = f"{os.stat(path).st_size} bytes"
    except OSError:
        size = "size unknown"
    consequence = ("speculative decoding stays off" if key == ANNOTATION_KEY
                   else f"annotation {key} reads as unset")
    _logger.warning(
        "vllm-specdec-plugin: the downward-API annotations file %s (%s) is not read: %s; the "
        "file is larger than %d bytes. Set %s to give the annotation's value instead",
        path, size, consequence, MAX_ANNOTATIONS_BYTES, env_name)


def read_opt_in(environ: Mapping[str, str]) -> Annotation:
    """The opt-in annotation, from env or the downward-API file."""
    return read_annotation(environ, ANNOTATION_KEY, ENV_ANNOTATION)

"""Bounded reads of the files the plugin is given, and YAML parsing that names the file.

Every parser of outside input reads through here, so the size limits live in one place.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from vllm_specdec_plugin.core.errors import SpecDecodeConfigError, quote_value

# Kubernetes caps all annotations of an object at 256 KiB; a ConfigMap at 1 MiB.
MAX_ANNOTATIONS_BYTES = 256 * 1024
MAX_CONFIG_BYTES = 1024 * 1024
# The user's presets file: a table of presets, at most a ConfigMap's size like the config.
MAX_PRESETS_BYTES = 1024 * 1024


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

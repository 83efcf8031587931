"""The tuned-preset table (pure): built from a presets document, looked up by name.

The documents are `data/presets.yaml` in the package and the user's `VLLM_SPECDEC_PRESETS_FILE`,
read by `inputs/presets.py`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from vllm_specdec_plugin.core.errors import SpecDecodeConfigError, quote_value


@dataclass(frozen=True)
class TunedPreset:
    """One preset with a KAITO-tuned speculative config."""

    name: str
    speculative_config: Mapping[str, Any]
    aliases: tuple[str, ...] = ()

    def names(self) -> tuple[str, ...]:
        return (self.name, *self.aliases)


@dataclass(frozen=True)
class PresetTable:
    """Tuned presets, looked up case-insensitively by preset name, alias or model id."""

    presets: tuple[TunedPreset, ...] = field(default_factory=tuple)

    def find(self, candidates: Iterable[str | None]) -> tuple[TunedPreset, str] | None:
        """The first candidate name that matches a tuned preset, with the name that matched.

        A local checkpoint path matches on its trailing `org/name` or `name`.
        """
        index = {alias.lower(): preset for preset in self.presets for alias in preset.names()}
        for candidate in candidates:
            if not candidate:
                continue
            for key in _lookup_keys(candidate):
                if key in index:
                    return index[key], candidate
        return None


def _lookup_keys(name: str) -> list[str]:
    parts = [part for part in name.strip().rstrip("/").split("/") if part]
    keys = [name.strip().lower()]
    if len(parts) >= 2:
        keys.append("/".join(parts[-2:]).lower())
    if parts:
        keys.append(parts[-1].lower())
    return keys


def table_from_document(document: Any, source: str) -> PresetTable:
    """A presets document (already parsed) as a table; errors name `source` and the fix."""
    if not isinstance(document, dict) or not isinstance(document.get("presets"), list):
        raise SpecDecodeConfigError(
            f"presets file {source} must be a mapping with a `presets:` list of "
            "{name, aliases, speculative_config} entries"
        )
    default = document.get("default_speculative_config", {"method": "mtp",
                                                         "num_speculative_tokens": 1})
    if not isinstance(default, dict):
        raise SpecDecodeConfigError(
            f"default_speculative_config in presets file {source} must be a mapping"
        )
    presets = []
    for number, entry in enumerate(document["presets"], start=1):
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
            raise SpecDecodeConfigError(
                f"entry {number} of presets file {source} needs a string `name`, got "
                f"{quote_value(entry)}"
            )
        aliases = entry.get("aliases", [])
        config = entry.get("speculative_config", default)
        if not isinstance(aliases, list) or not all(isinstance(a, str) for a in aliases):
            raise SpecDecodeConfigError(
                f"aliases of preset {entry['name']!r} in {source} must be a list of strings"
            )
        if not isinstance(config, dict) or "method" not in config:
            raise SpecDecodeConfigError(
                f"speculative_config of preset {entry['name']!r} in {source} must be a "
                "mapping with a `method`"
            )
        presets.append(TunedPreset(entry["name"], dict(config), tuple(aliases)))
    return PresetTable(tuple(presets))

"""The tuned-preset documents: `data/presets.yaml` in the package, and the user's file in front."""

from __future__ import annotations

from collections.abc import Mapping
from importlib import resources

from vllm_specdec_plugin.core.limits import MAX_PRESETS_BYTES
from vllm_specdec_plugin.core.presets import PresetTable, table_from_document
from vllm_specdec_plugin.core.settings import ENV_PRESETS_FILE
from vllm_specdec_plugin.inputs.files import read_input_file
from vllm_specdec_plugin.inputs.parsers import load_yaml

BUILTIN_PRESETS = "vllm_specdec_plugin/data/presets.yaml"


def parse_preset_table(text: str, source: str) -> PresetTable:
    """Parse a presets YAML document (safe_load) into a table."""
    return table_from_document(load_yaml(text, f"presets file {source}", "fix it"), source)


def builtin_preset_table() -> PresetTable:
    text = resources.files("vllm_specdec_plugin").joinpath("data/presets.yaml").read_text()
    return parse_preset_table(text, BUILTIN_PRESETS)


def load_preset_table(environ: Mapping[str, str]) -> PresetTable:
    """The built-in table, with the user's file (if any) in front of it."""
    table = builtin_preset_table()
    if not environ.get(ENV_PRESETS_FILE):
        return table
    text, path = read_input_file(environ, ENV_PRESETS_FILE, "", MAX_PRESETS_BYTES,
                                 "a presets YAML file")
    user = parse_preset_table(text or "", path)
    return PresetTable(user.presets + table.presets)

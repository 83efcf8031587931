"""The tuned-preset table: the package's file and the user's presets file."""

from __future__ import annotations

import pytest

from vllm_specdec_plugin.core.errors import SpecDecodeConfigError
from vllm_specdec_plugin.inputs.presets import load_preset_table, parse_preset_table


def test_user_presets_file_extends_the_table(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text("presets:\n  - name: acme/Model-7B\n    speculative_config:\n"
                    "      method: mtp\n      num_speculative_tokens: 2\n")
    table = load_preset_table({"VLLM_SPECDEC_PRESETS_FILE": str(path)})
    preset, _ = table.find(["ACME/model-7b"])
    assert preset.speculative_config == {"method": "mtp", "num_speculative_tokens": 2}
    assert table.find(["Qwen/Qwen3.5-2B"]) is not None


@pytest.mark.parametrize("text", ["presets: [", "presets: 3", "presets:\n  - {aliases: [a]}",
                                  "presets:\n  - {name: a, speculative_config: {k: 1}}"])
def test_broken_presets_file(text):
    with pytest.raises(SpecDecodeConfigError, match="presets file|preset 'a'"):
        parse_preset_table(text, "p.yaml")

"""The plugin's settings: every env name defined once, every VLLM_SPECDEC_* value checked up front
(in the engine hook, in `explain` and in the launcher alike)."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from vllm_specdec_plugin.core import settings
from vllm_specdec_plugin.core.errors import SpecDecodeConfigError
from vllm_specdec_plugin.core.settings import check_settings
from vllm_specdec_plugin.inputs.presets import load_preset_table

PACKAGE = Path(settings.__file__).parents[1]


@pytest.mark.parametrize(("env", "needle"), [
    ({"VLLM_SPECDEC_ON_ERROR": "serve_without"},
     "VLLM_SPECDEC_ON_ERROR='serve_without' is not one of fail, serve-without"),
    ({"VLLM_SPECDEC_FALLBACK": "lookahead"},
     "VLLM_SPECDEC_FALLBACK='lookahead' is not one of ngram, suffix, adaptive"),
    ({"VLLM_SPECDEC_SCHEDULE": "OFF"}, "VLLM_SPECDEC_SCHEDULE='OFF' is not one of on, static, off"),
    ({"VLLM_SPECDEC_FALLBAK": "suffix"},
     "VLLM_SPECDEC_FALLBAK is not a setting of vllm-specdec-plugin"),
])
def test_bad_setting_refused_by_name_with_allowed_values(env, needle):
    with pytest.raises(SpecDecodeConfigError, match=re.escape(needle)):
        check_settings(env)


def test_good_settings_pass():
    good = {"VLLM_SPECDEC_ON_ERROR": "serve-without", "VLLM_SPECDEC_FALLBACK": "adaptive",
            "VLLM_SPECDEC_SCHEDULE": "", "VLLM_SPECDEC_DRAFT_MODEL": "/d", "VLLM_OTHER": "x"}
    assert check_settings(good) is None  # no error


def explain(capsys, *args: str, env: dict) -> tuple[int, dict, str]:
    from vllm_specdec_plugin.cli import explain as run_explain

    base = {k: v for k, v in os.environ.items() if k not in settings.PLUGIN_ENV}
    rc = run_explain(list(args), {**base, **env})
    out, err = capsys.readouterr()
    return rc, json.loads(out), err


def test_explain_refuses_a_bad_setting_as_the_engine_does(capsys):
    bad = {"VLLM_SPECDEC_ON_ERROR": "serve_without", "KAITO_ANNOTATIONS_FILE": ""}
    rc, decision, err = explain(capsys, "--annotation", "true", "--model", "m", "--platform",
                                "cpu", env=bad)
    assert rc == 2 and "VLLM_SPECDEC_ON_ERROR='serve_without'" in decision["errors"][0]
    assert "VLLM_SPECDEC_ON_ERROR='serve_without'" in err and "Traceback" not in err
    rc, decision, _ = explain(capsys, "--annotation", "false", "--model", "m", "--platform",
                              "cpu", env=bad)
    assert rc == 0 and not decision["errors"]  # not opted in: nothing read, nothing refused


def test_engine_hook_refuses_a_bad_setting(monkeypatch, tiny_llama):
    from vllm.engine.arg_utils import EngineArgs

    from vllm_specdec_plugin.engine.hook import apply_to_engine_args

    for name in settings.PLUGIN_ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("KAITO_ANNOTATIONS_FILE", "")
    monkeypatch.setenv("KAITO_ENABLE_SPECULATIVE_DECODING", "true")
    monkeypatch.setenv("VLLM_SPECDEC_ON_ERROR", "serve_without")
    with pytest.raises(SpecDecodeConfigError, match="not one of fail, serve-without"):
        apply_to_engine_args(EngineArgs(model=str(tiny_llama)))


def test_presets_file_has_a_size_limit(tmp_path):
    big = tmp_path / "presets.yaml"
    big.write_text("#" * (2 * 1024 * 1024))
    with pytest.raises(SpecDecodeConfigError,
                       match="VLLM_SPECDEC_PRESETS_FILE=.*larger than 1048576 bytes"):
        load_preset_table({"VLLM_SPECDEC_PRESETS_FILE": str(big)})


def test_env_names_are_spelled_only_in_settings():
    """Every other module imports the names; a second spelling could drift."""
    literal = re.compile(r"""["'](?:VLLM_SPECDEC_|KAITO_)[A-Z_]+["']""")
    home = Path(settings.__file__)
    spelled = {str(path.relative_to(PACKAGE)): literal.findall(path.read_text())
               for path in PACKAGE.rglob("*.py") if path != home}
    assert len(spelled) > 20  # the whole package was read
    assert {name: found for name, found in spelled.items() if found} == {}
    for name in re.findall(r'"((?:VLLM_SPECDEC_|KAITO_)[A-Z_]+)"', home.read_text()):
        assert name in settings.PLUGIN_ENV

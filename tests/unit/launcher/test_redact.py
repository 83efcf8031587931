"""Redaction by destination: every spelling vLLM's own parser accepts for a secret flag."""

from __future__ import annotations

import json

import pytest
from test_launcher import dry_run, host_root

from vllm_specdec_plugin.core.redact import REDACTED, redact_uri
from vllm_specdec_plugin.launcher.redact import SECRET_DESTINATIONS, redact_argv

SERVE = ["vllm", "serve", "m"]


@pytest.mark.parametrize("flags", [
    ["--hf-token", "hf_SECRET1"],
    ["--hf_token", "hf_SECRET1"],
    ["--hf-token=hf_SECRET1"],
    ["--hf_token=hf_SECRET1"],
    ["--hf-tok", "hf_SECRET1"],          # an abbreviation argparse expands
    ["--hf-tok=hf_SECRET1"],
    ["--api-key", "K1SECRET", "K2SECRET"],  # nargs="+": every value
    ["--api_key", "K1SECRET"],
    ["--api-ke=K1SECRET"],
    ["--port", "5000", "--api-key", "K1SECRET", "K2SECRET", "--max-model-len", "64"],
])
def test_secret_flags_redacted_in_every_spelling(flags):
    shown = redact_argv([*SERVE, *flags])
    text = json.dumps(shown)
    assert "SECRET" not in text, shown
    assert REDACTED in text
    assert shown[:3] == SERVE
    if "--port" in flags:  # other values are left alone
        assert shown[shown.index("--port") + 1] == "5000" and shown[-1] == "64"


def test_the_secret_list_is_vllms_destinations():
    from vllm_specdec_plugin.inputs.engine_args import vllm_serve_parser

    dests = {action.dest for action in vllm_serve_parser()._actions}
    assert set(SECRET_DESTINATIONS) <= dests


def test_without_vllms_parser_spellings_are_still_redacted():
    def no_vllm():
        raise ImportError("no vllm")

    for flags in (["--hf_tok", "hf_SECRET1"], ["--api-key", "K1SECRET", "K2SECRET"],
                  ["--hf-token=hf_SECRET1"]):
        shown = redact_argv([*SERVE, *flags], parser_factory=no_vllm)
        assert "SECRET" not in json.dumps(shown), shown


@pytest.mark.parametrize(("text", "expected"), [
    ("https://user:p@ss@host/x", f"https://{REDACTED}@host/x"),
    ("https://user:pw@host:1/x?a=b@c", f"https://{REDACTED}@host:1/x?a=b@c"),
    ("s3://key:se@cr@et@bucket", f"s3://{REDACTED}@bucket"),
    ("http://host/path@x", "http://host/path@x"),
])
def test_url_credentials_with_at_signs(text, expected):
    assert redact_uri(text) == expected


def test_secret_embedded_in_another_value_is_redacted():
    shown = redact_argv([*SERVE, "--hf-token", "hf_SECRET1",
                         "--otlp-traces-endpoint", "http://collector/?token=hf_SECRET1"])
    assert "SECRET" not in json.dumps(shown)


def test_dry_run_hides_every_spelling(capsys, tmp_path):
    root, path = host_root(tmp_path, "cpu")
    rc, plan, err = dry_run(capsys, root, path, "--model", "m", "--", "--hf_token", "hf_SECRET1",
                            "--api-key", "K1SECRET", "K2SECRET", "--hf-tok", "hf_SECRET2",
                            "--served-model-name", "https://u:p@ss@h")
    assert rc == 0 and plan is not None, err
    text = json.dumps(plan)
    assert "SECRET" not in text and "p@ss" not in text


MODEL_URIS = ["s3://AKIAEXAMPLE:SECRET1/x@bucket/m", "https://user:SECRET1@host/m",
              "https://SECRET1@host/m", "gs://SECRET1@bucket/m", "hf://org/m?token=SECRET1",
              "https://host/m?X-Amz-Signature=SECRET1", "org/m?%74oken=SECRET1"]


@pytest.mark.parametrize("served", [[], ["--served-model-name", "Qwen/Qwen3.5-4B"]])
@pytest.mark.parametrize("opt_in", ["true", "false"])
@pytest.mark.parametrize("model", MODEL_URIS)
def test_dry_run_hides_credentials_in_the_model(capsys, tmp_path, model, opt_in, served):
    """The model reaches argv, the decision's preset (the model's name where no preset
    matched) and a warning quoting it (a served name that is a preset's, a hub-id model);
    none of them shows the secret (issue 29 item 8)."""
    root, path = host_root(tmp_path, "cpu")
    rc, plan, err = dry_run(capsys, root, path, "--model", model, "--", *served,
                            env={"KAITO_ENABLE_SPECULATIVE_DECODING": opt_in})
    assert rc == 0 and plan is not None, err
    assert "SECRET1" not in json.dumps(plan) + err
    assert plan["argv"][2] == redact_uri(model) and REDACTED in plan["argv"][2]
    if opt_in == "true" and not served:
        assert plan["decision"]["preset"] == redact_uri(model)
    if opt_in == "true" and served and model.startswith("org/"):
        assert any("--model 'org/m?%74oken=<redacted>'" in warning
                   for warning in plan["decision"]["warnings"]), plan["decision"]


def test_vllms_parser_tells_which_values_feed_a_secret_destination():
    """The values come from vLLM's parser itself (the spelling fallback is only for hosts
    without vLLM): abbreviations, `_` spellings, `=` forms and nargs="+" as argparse reads them;
    a value of another flag is never taken for a secret."""
    from vllm_specdec_plugin.launcher.redact import _secret_values

    argv = ["m", "--api-key", "K1", "K2", "--hf_tok", "T1", "--port", "8001",
            "--served-model-name", "chat", "--max-model-len=64"]
    assert _secret_values(argv, None) == {"K1", "K2", "T1"}

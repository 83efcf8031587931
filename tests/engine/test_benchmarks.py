"""The benchmarks: the paired harness's quick run on the tiny checkpoint (`python -m benchmarks
paired --quick`: shape, not timings), its data and arithmetic, and the one way to run them all
(`benchmarks/__main__.py`)."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import clean_env

from benchmarks.lib.null_proposer import CLASS_PATH, NullProposer
from benchmarks.lib.stats import bootstrap_median_interval, first_difference, percentile
from benchmarks.lib.workloads import load_workload
from benchmarks.paired import run
from benchmarks.paired.configs import BASELINE, CONFIGURATIONS, NULL_SPEC, by_name
from benchmarks.paired.engine_client import placement
from benchmarks.paired.figures import spec_figures, summarize_cell
from benchmarks.paired.targets import target
from benchmarks.workloads.build import WORKLOADS, build

REPO = Path(__file__).resolve().parents[2]

QUICK_TIMEOUT_S = 900
CELL_KEYS = {"workload", "concurrency", "pairs", "ratio_median", "ratio_interval", "ratios",
             "tpot_ratio_median", "a_tokens_per_s_median", "b_tokens_per_s_median",
             "b_spec_decode", "mismatched_requests", "requests", "load_average",
             "foreign_cpu_share", "target", "met", "pair_records", "cpu_ratio_median",
             "cpu_ratio_interval", "a_spread_median"}


@pytest.fixture(scope="module")
def quick_result(tiny_llama: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """`paired --quick` (none vs plugin) on the tiny Llama: the result JSON (dir under "_out")."""
    out = tmp_path_factory.mktemp("bench-results")
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks", "paired", "--quick", "--model", str(tiny_llama),
         "--out", str(out), "--settle", "0.3"],
        cwd=REPO, env=clean_env(tmp=out), capture_output=True, text=True,
        timeout=QUICK_TIMEOUT_S, check=False)
    assert done.returncode == 0, f"{done.stdout[-3000:]}\n{done.stderr[-6000:]}"
    result: dict[str, Any] = json.loads((out / "none-vs-plugin.json").read_text())
    result["_out"] = out
    return result


@pytest.mark.engine
def test_quick_run_writes_paired_cells(quick_result: dict[str, Any]) -> None:
    out, meta = quick_result["_out"], quick_result["meta"]
    assert (out / "none-vs-plugin.md").read_text().startswith(
        "# Paired benchmark: none-vs-plugin")
    assert (out / "none-vs-plugin.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert meta["quick"] is True and meta["concurrency"] == [1, 4] and meta["pairs"] == 2
    assert meta["command"].startswith("python -m benchmarks paired --quick --model ")
    assert meta["kind"] == "plugin"
    pinned = placement(sorted(os.sched_getaffinity(0)))
    assert meta["placement"] == (None if pinned is None else {
        "worker_cpus": pinned[0], "frontend_cpus": sorted(pinned[1])})
    cells = quick_result["cells"]
    assert [(c["workload"], c["concurrency"]) for c in cells] == [
        (w, c) for w in meta["workloads"] for c in meta["concurrency"]]
    for cell in cells:
        assert set(cell) >= CELL_KEYS, cell
        assert cell["pairs"] == len(cell["ratios"]) == len(cell["load_average"]) == 2
        low, high = cell["ratio_interval"]
        assert low <= cell["ratio_median"] <= high
        assert cell["mismatched_requests"] == 0, cell["pair_records"]
        assert cell["requests"] == 2 * cell["concurrency"]
        for pair in cell["pair_records"]:
            assert pair["b"]["output_tokens"] == cell["concurrency"] * meta["max_tokens"]
            assert len(pair["a"]["before_after_tok_s"]) == 2
            assert 0 <= pair["foreign_cpu_share"] <= 1


@pytest.mark.engine
def test_quick_run_records_the_plugin_decision_and_acceptance(
        quick_result: dict[str, Any]) -> None:
    a, b = quick_result["configurations"]["A"], quick_result["configurations"]["B"]
    assert (a["name"], b["name"]) == ("none", "plugin")
    assert b["decision"]["source"] == "ngram-fallback"
    spec = b["resolved"]["speculative_config"]
    assert (spec["method"], spec["num_speculative_tokens"], spec["prompt_lookup_max"]) == (
        "ngram", 5, 4)
    assert a["resolved"]["speculative_config"] is None
    assert any("zero-draft-plain-sampler in place" in line for line in b["plugin_log"])
    assert not any("zero-draft" in line for line in a["plugin_log"])
    figures = [c["b_spec_decode"] for c in quick_result["cells"]]
    assert sum(f["draft_tokens"] for f in figures) > 0  # the schedule drafts at 1 and 4
    for f in figures:
        assert f["accepted_tokens"] <= f["draft_tokens"]


def test_plan_names_the_comparison() -> None:
    aa = run.plan(run.parse_args(["--aa"]))
    assert (aa["configs"], aa["kind"], aa["name"]) == (["none", "none"], "aa", "aa")
    null = run.plan(run.parse_args(["--candidate", "null"]))
    assert (null["configs"], null["kind"], null["name"]) == (["none", "null"], "null",
                                                             "none-vs-null")
    full = run.plan(run.parse_args([]))
    assert full["pairs"] >= 5 and full["concurrency"] == [1, 4, 16, 32]
    assert full["workloads"] == list(run.WORKLOADS)
    assert [c.name for c in run.configurations(["none", "none"], "cpu")] == ["none", "none"]


def test_cells_walk_through_the_workload() -> None:
    workload = {"prompts": [{"id": str(i)} for i in range(5)]}
    assert [p["id"] for p in run.cell_prompts(workload, 3, 0)] == ["0", "1", "2"]
    assert [p["id"] for p in run.cell_prompts(workload, 3, 4)] == ["4", "0", "1"]


def test_null_proposer_never_drafts() -> None:
    assert NULL_SPEC["model"] == CLASS_PATH and NULL_SPEC["method"] == "custom_class"
    proposer = NullProposer(vllm_config=None)
    assert proposer.propose([[1, 2], [], [3]], None, None, slot_mappings=None) == [[], [], []]


def test_workload_files_are_the_builder_output() -> None:
    """The shipped JSON is exactly what the seeded builder writes (deterministic data)."""
    for name in WORKLOADS:
        shipped = json.loads((REPO / "benchmarks" / "workloads" / f"{name}.json").read_text())
        assert shipped == build(name)
        assert len({p["id"] for p in shipped["prompts"]}) == len(shipped["prompts"]) >= 60
        for prompt in shipped["prompts"]:
            assert prompt["messages"][-1]["role"] == "user"


def test_configuration_table() -> None:
    names = [c.name for c in CONFIGURATIONS]
    assert len(names) == len(set(names)) and names[0] == BASELINE
    assert [c.name for c in by_name(["plugin"])] == [BASELINE, "plugin"]
    for optional in ("ngram-idle", "null", "null-vllm"):
        assert optional not in [c.name for c in by_name(None)]
        assert [c.name for c in by_name([optional])] == [BASELINE, optional]
    with pytest.raises(ValueError, match="unknown configuration"):
        by_name(["nope"])


def test_figures() -> None:
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.5
    assert percentile([], 90) is None
    assert first_difference([1, 2, 3], [1, 2, 3]) is None
    assert first_difference([1, 2, 3], [1, 5, 3]) == 1
    assert first_difference([1, 2], [1, 2, 3]) == 2
    figures = spec_figures({"drafts": 4.0, "draft_tokens": 20.0, "accepted": 10.0})
    assert figures["acceptance_rate"] == 0.5 and figures["mean_acceptance_length"] == 3.5
    assert spec_figures({"drafts": 0.0, "draft_tokens": 0.0, "accepted": 0.0})[
        "acceptance_rate"] is None


def test_bootstrap_interval_of_the_median() -> None:
    ratios = [0.97, 0.99, 1.0, 1.01, 1.02, 1.04]
    low, high = bootstrap_median_interval(ratios)
    assert min(ratios) <= low <= statistics.median(ratios) <= high <= max(ratios)
    assert bootstrap_median_interval(ratios) == (low, high)  # fixed seed
    assert bootstrap_median_interval([1.0] * 6) == (1.0, 1.0)
    wide = bootstrap_median_interval([0.8, 0.9, 1.0, 1.1, 1.2, 1.3])
    assert wide[1] - wide[0] > high - low
    assert bootstrap_median_interval([]) is None


def pair(ratio: float, drafts: float = 0.0, mismatches: int = 0) -> dict[str, Any]:
    spec = {"drafts": drafts, "draft_tokens": 5 * drafts, "accepted": 2 * drafts}
    return {"a": {"output_tokens_per_s": 100.0}, "b": {"output_tokens_per_s": 100 * ratio,
                                                       "spec": spec},
            "ratio": ratio, "tpot_ratio": 1 / ratio, "load_average": 1.0,
            "foreign_cpu_share": 0.01, "mismatches": [{}] * mismatches, "b_ids": ["x", "y"]}


def test_cell_summary_and_targets() -> None:
    cell = summarize_cell([pair(0.99), pair(1.0), pair(1.01, drafts=2, mismatches=1),
                           pair(1.0), pair(1.0)])
    assert cell["ratio_median"] == 1.0 and cell["pairs"] == 5
    assert cell["b_spec_decode"]["drafts"] == 2 and cell["b_spec_decode"]["acceptance_rate"] == 0.4
    assert (cell["mismatched_requests"], cell["requests"]) == (1, 10)
    assert target("aa", "open_ended", cell)["met"] is True
    assert target("null", "input_grounded", cell)["met"] is True
    assert target("plugin", "mt_bench", cell)["met"] is True
    assert target("plugin", "input_grounded", cell)["met"] is None  # gain reported
    slow = summarize_cell([pair(0.95), pair(0.96), pair(0.97), pair(0.96), pair(0.95)])
    assert target("null", "open_ended", slow)["met"] is False
    noisy = summarize_cell([pair(0.97), pair(1.03), pair(0.96), pair(1.04), pair(1.0)])
    assert target("aa", "open_ended", noisy)["met"] is False


def test_adaptive_targets_are_issue_22s_by_baseline() -> None:
    even = summarize_cell([pair(1.0)] * 5)
    behind = summarize_cell([pair(0.96)] * 5)  # within 5% of the baseline
    assert target("adaptive", "open_ended", even)["met"] is True
    assert target("adaptive", "open_ended", behind)["met"] is False  # >= 0.98 of none
    at_4, at_16 = {**behind, "concurrency": 4}, {**behind, "concurrency": 16}
    assert target("adaptive", "input_grounded", at_4, "kaito-static")["met"] is True  # >= 0.95
    assert target("adaptive", "input_grounded", at_16, "kaito-static")["met"] is False  # >= 1
    assert target("adaptive", "multi_turn", at_16, "suffix-local")["met"] is None  # none at 16
    assert target("adaptive", "mixed", {**behind, "concurrency": 4}, "kaito-static")[
        "met"] is False
    assert target("adaptive", "mixed", {**even, "concurrency": 4}, "none")["met"] is True


def test_placement_pins_both_engines_alike() -> None:
    assert placement([0, 1]) == ("0", {1})
    assert placement([0, 1, 2, 3]) == ("0,1,2", {3})
    assert placement([5]) is None
    assert run.parse_args([]).pin and not run.parse_args(["--no-pin"]).pin
    assert run.parse_args([]).settle > 1.0  # past vLLM's 1 s shared-memory busy loop


def test_cpu_time_ratio_and_the_a_bursts_spread() -> None:
    from benchmarks.paired.figures import cpu_ratio

    a1, a2 = {"tokens_per_cpu_s": 10.0}, {"tokens_per_cpu_s": 30.0}
    assert cpu_ratio(a1, {"tokens_per_cpu_s": 22.0}, a2) == pytest.approx(1.1)
    assert cpu_ratio(a1, {"tokens_per_cpu_s": None}, a2) is None
    pairs = [{**pair(1.0), "a": {"output_tokens_per_s": 100.0, "before_after_tok_s": [100, v]}}
             for v in (110.0, 95.0, 100.0)]
    assert summarize_cell(pairs)["a_spread_median"] == pytest.approx(0.05)


def test_mixed_workload_alternates_copying_and_open_ended_prompts() -> None:
    mixed = load_workload("mixed")
    ids = [p["id"] for p in mixed["prompts"][:4]]
    assert ids[0].startswith("input_grounded") and ids[1].startswith("open_ended")
    assert ids[2].startswith("input_grounded") and ids[3].startswith("open_ended")
    assert "mixed" not in run.plan(run.parse_args([]))["workloads"]


def test_results_are_pooled_per_concurrency_and_can_be_re_reported(tmp_path: Path) -> None:
    from benchmarks.paired import report

    cells = [{"workload": w, "concurrency": 4, "ratios": ratios}
             for w, ratios in (("x", [0.9, 1.0, 1.1]), ("y", [1.0, 1.2, 1.3]))]
    pooled = report.pooled({"meta": {"concurrency": [1, 4]}, "cells": cells})
    assert len(pooled) == 1 and pooled[0]["pairs"] == 6
    assert pooled[0]["ratio_median"] == pytest.approx(1.05)
    low, high = pooled[0]["ratio_interval"]
    assert 0.9 <= low <= 1.05 <= high <= 1.3


def test_smollm2_cached_checkpoint_is_instant(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """A marked checkpoint is returned as is: no download, no conversion."""
    from benchmarks import smollm2

    def no_download(dest: Path) -> Path:
        raise AssertionError("downloaded although the checkpoint is cached")

    monkeypatch.setattr(smollm2, "download_wheel", no_download)
    target_dir = tmp_path / smollm2.MODEL_NAME
    target_dir.mkdir()
    (target_dir / smollm2.MARKER).write_text("done\n")
    assert smollm2.ensure_smollm2(tmp_path) == target_dir
    monkeypatch.setenv(smollm2.ENV_CACHE, str(tmp_path))
    assert smollm2.ensure_smollm2() == target_dir


def test_every_benchmark_runs_through_one_command(capsys: pytest.CaptureFixture[str]) -> None:
    """`python -m benchmarks --list` names every registered benchmark; each row's module has
    `main(argv)`, and every module of the groups with a `main` is registered."""
    import importlib

    from benchmarks.__main__ import BENCHMARKS, by_name, main

    assert main(["--list"]) == 0
    listed = capsys.readouterr().out
    for benchmark in BENCHMARKS:
        assert f"  {benchmark.name}  " in listed and benchmark.summary in listed
        assert callable(importlib.import_module(benchmark.module).main), benchmark
    assert by_name("zero-draft-paired") == by_name("zero_draft_paired") is not None
    assert main(["no-such-benchmark"]) == 2
    modules = {b.module for b in BENCHMARKS}
    for group in ("paired", "probes", "reliability"):
        for path in sorted((REPO / "benchmarks" / group).glob("*.py")):
            module = f"benchmarks.{group}.{path.stem}"
            if path.stem != "engine" and "\ndef main(" in path.read_text():
                assert module in modules, f"{module} has a main but no row in BENCHMARKS"

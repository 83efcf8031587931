"""The schedule controller's contract checks, shared by the vLLM 0.32 engine tier
(tests/engine/test_schedule_controller.py) and the vLLM 0.33 tier (tests/compat/test_vllm033.py):
tests/support/controller_contract.py run in that venv, and what its answer must show."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import clean_env

from support import script_runs

CONTRACT = Path(__file__).resolve().parent / "controller_contract.py"


def contract(python: str, model: str, tmp_path: Path, script: Path = CONTRACT) -> dict:
    """`script MODEL` in the venv of `python`: its last stdout line, as JSON."""
    proc = script_runs.run(script, [model], clean_env(tmp=tmp_path), 600, python=python,
                           prelude=script_runs.CONTRACT_PRELUDE, starts_engine=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def check_contract(found: dict) -> None:
    """What vLLM's own schedule() scheduled is, step by step, what the controller wrote; only
    values of the dense lookup (the k values MRV2 captures graphs for) are ever written; the
    async scheduler runs the same wrappers."""
    assert "schedule-controller (shortcut)" in found["changes"]
    for mode in ("sync", "async"):
        cell = found[mode]
        assert cell["controller"] is True, cell
        assert cell["k_set"] == cell["lookup_values"] == [0, 2, 5]
        decode = [s for s in cell["steps"] if not s["prefill"]]
        assert all(s["scheduled_k"] == s["lookup_k"] for s in cell["steps"])
        assert {s["scheduled_k"] for s in decode} <= set(cell["k_set"])
        assert len({s["scheduled_k"] for s in decode}) > 1  # the controller did write
    assert found["async"]["class"].endswith("AsyncScheduler")
    # The controller raising inside update_from_output never reaches vLLM's engine loop.
    assert found["fault"] == {"runtime_after": False, "lookup_is_table": True, "steps_after": 10}
    # In vLLM's async order a step is one engine cycle (a schedule-to-update window: ~two).
    timing = found["async_order"]
    assert timing["measured"] > 50, timing
    assert 0.75 < timing["step_s"] / timing["cycle_s"] < 1.3, timing
    # ... and its lookup writes land two steps late there (three where the decision thread's
    # poll misses a forward pass), which it writes each block's next k ahead by
    assert 1.5 < timing["lag"] < 3.5, timing
    assert found["pipeline_parallel"] == {"controller": False}
    # No measured step spans an idle gap, whether the last requests finished or were aborted.
    for case, gaps in found["idle_gaps"].items():
        assert gaps["measured"] >= 15 and gaps["longest_s"] < 0.2, (case, gaps)
    # The per-step counts from vLLM's own spec-decoding stats (O(1)) and from the walk are, step
    # by step, what each step held: batch, k, tokens, drafts, clean (no prefill chunk).
    counted = found["counts"]
    assert counted["uses_stats"] == {"stats": True, "walk": False}
    assert counted["outputs_alive"] == 0
    # Requests ended with drafts accepted past their end, at a length limit and at a stop token:
    # the controller counts the tokens vLLM emitted (checked step by step below), not the
    # stats' accepted drafts.
    for way in ("stats", "walk"):
        assert {"L", "S"} <= set(counted["overrun"][way]), counted["overrun"]
    for way in ("stats", "walk"):
        steps = [s for s in counted["truth"][way] if s[0]]  # the controller sees no empty step
        assert counted["seen"][way] == steps, (way, counted)
        assert sum(s[3] for s in steps) > 100 and any(s[2] > s[0] for s in steps)  # accepted
        assert any(not s[4] for s in steps) and any(s[4] for s in steps)  # prefill and decode
    # With the stats, the rows that drafted and the drafts accepted past each position reach
    # the controller (`Step.drafts`, `Step.accepted`), except in a step in which a request
    # ended; without them, no step is counted so.
    stats = counted["seen"]["stats"]
    assert sum(1 for s in stats if s[5] > 0 and sum(s[6]) > 0) > 20, stats
    assert any(s[5] == -1 for s in stats) and all(s[5] == -1 for s in counted["seen"]["walk"])



CAPS_CONTRACT = Path(__file__).resolve().parent / "request_caps_contract.py"


def caps_contract(python: str, model: str, tmp_path: Path) -> dict:
    return contract(python, model, tmp_path, CAPS_CONTRACT)


def check_caps_contract(found: dict) -> None:
    """vLLM's own `Scheduler` (drafts handed back as the engine core does) and `AsyncScheduler`
    (placeholders) schedule, per request and per step, min(its cap, the engine's k) draft
    tokens; its intake refuses every bad value with VLLMValidationError naming the field."""
    assert {"request-speculation (shortcut)", "request-draft-caps (shortcut)"} <= set(
        found["changes"])
    for mode, cls in (("sync", "Scheduler"), ("async", "AsyncScheduler")):
        cell = found[mode]
        assert cell["class"] == cls and cell["k"] == 5
        drafted = cell["drafted"]
        assert len(drafted["none"]) >= 8, cell  # decode steps seen for every request
        assert set(drafted["none"]) == {5} and set(drafted["above"]) == {5}, cell
        assert set(drafted["off"]) == {0} and set(drafted["two"]) == {2}, cell
    for name, outcome in found["validation"].items():
        if name.startswith("good-"):
            assert outcome == "accepted", (name, outcome)
        else:
            assert outcome["type"] == "VLLMValidationError", (name, outcome)
            assert outcome["parameter"] == "vllm_xargs.num_speculative_tokens"
            assert "is refused: expected a whole number >= 0" in outcome["message"]

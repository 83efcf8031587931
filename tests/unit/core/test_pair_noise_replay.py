"""`python -m benchmarks pair_noise` replays a `bucket_visits` run into a controller of its own
(benchmarks/probes/pair_noise.py). Its figures in docs/schedule-controller.md hold only if the
replay decides as the engine's controller did and records every pair that controller judged.
Checked here on the synthetic engine of the noise tests."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import pytest
from test_schedule_control_noise import K_SET, PRIOR, Traffic
from test_schedule_control_pace import mostly

from benchmarks.probes import pair_noise
from benchmarks.probes.bucket_visits import record, summary
from vllm_specdec_plugin.core.arm_stats import ArmEstimate
from vllm_specdec_plugin.core.schedule_control import ScheduleController
from vllm_specdec_plugin.core.schedule_state import Step
from vllm_specdec_plugin.core.step_cost import bucket_label


def live_run(seed: int, monkeypatch: pytest.MonkeyPatch) -> tuple[dict, list[float]]:
    """A run recorded as `bucket_visits` records it, and every pair its controller judged
    (as read), in order."""
    judged: list[float] = []
    judge = ArmEstimate.judge

    def counting(self: ArmEstimate, gain: float, *args: object) -> int:
        judged.append(gain)
        return judge(self, gain, *args)

    monkeypatch.setattr(ArmEstimate, "judge", counting)
    controller = ScheduleController(PRIOR, K_SET)
    steps = record(controller)
    Traffic(seed, {2: 1.1, 5: 1.2}, 24).run(controller, mostly(24, 12, hold=120), 4000)
    monkeypatch.setattr(ArmEstimate, "judge", judge)
    return {"meta": {"prior": PRIOR, "k_set": list(K_SET), "max_graph_tokens": None,
                     "controller_params": asdict(controller.params)},
            "buckets": summary(steps), "trace": [list(step) for step in steps],
            "trace_columns": ["batch", "k", "clean", "block_k", "incumbent", "pairs",
                              "unpaired", "seconds", "tokens", "drafted"]}, judged


def replay(run: dict) -> object:
    controller = pair_noise.recording_controller(run["meta"])
    for batch, k, clean, *_, seconds, tokens, drafted in run["trace"]:
        controller.observe(Step(batch, k, seconds, tokens, drafted, clean))
    return controller


@pytest.mark.parametrize("seed", range(3))
def test_the_replay_decides_as_the_run_and_records_every_pair(seed, monkeypatch):
    run, judged = live_run(seed, monkeypatch)
    controller = replay(run)
    assert judged, "the run paired nothing: the test would show nothing"
    assert [pair[3] for pair in controller.pairs] == judged
    assert {label: b["incumbent"] for label, b in run["buckets"].items()} == {
        bucket_label(key): state.incumbent for key, state in controller.buckets.items()}
    # Every drafting exploration block drafted at most every row (a share within [0, 1]).
    shares = [x for pair in controller.pairs for x in pair[4] if x is not None]
    assert shares and all(0.0 <= x <= 1.0 for x in shares)


def test_a_side_at_k0_has_no_draft_share():
    assert pair_noise.shares([0.0, 0.0], [6.0, 24.0]) == (None, 0.25)
    assert pair_noise.shares([3.0, 12.0], [0.0, 0.0]) == (0.25, None)


def test_a_run_without_step_seconds_is_refused_in_one_line(tmp_path: Path):
    old = tmp_path / "old.json"
    old.write_text(json.dumps({"trace_columns": ["batch", "k"], "trace": []}))
    with pytest.raises(SystemExit, match="has no step seconds: record it again"):
        pair_noise.main([str(old), "--out", str(tmp_path / "out.json")])

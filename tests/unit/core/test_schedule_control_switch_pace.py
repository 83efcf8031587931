"""Each arm's pace right after a switch (core/explore_pace.py `restart_after_switch`).

A switch restarts every arm's evidence (measured against the old incumbent, it must not decide
against the new one), but what it said still prices the looks: an arm sure to lose against the
winner starts at the gap its loss allows, not at the first pace. On `Passages` with counts
(tests/unit/core/test_schedule_control_counted.py's TEXT: k=2 4.9% ahead of the prior k=5 at
batch 4, k=0 further behind), the case of input_grounded c=4 on the slow host, where the
controller left k=5 for k=2 in the warm-up and then explored 24-33% of the measured steps.
The mutant restarts every arm at `explore_every`, the rule before. Seeds fixed.
"""

from __future__ import annotations

import math
import statistics

import pytest
from support.passages import Passages, fixed_rate
from test_schedule_control_counted import K_SET, TEXT

from vllm_specdec_plugin.core import schedule_control
from vllm_specdec_plugin.core.arm_stats import ArmEstimate
from vllm_specdec_plugin.core.explore_pace import restart_after_switch
from vllm_specdec_plugin.core.schedule_control import ControllerParams, ScheduleController
from vllm_specdec_plugin.core.step_cost import bucket

P = ControllerParams()


def first_pace(arms: dict[int, ArmEstimate], _old: int, _new: int, p: ControllerParams) -> None:
    """The rule before: every arm at the first pace."""
    for arm in arms.values():
        arm.reset()
        arm.gap = arm.wait = p.explore_every


def after_switch(seeds: int, window: int, then: dict[str, float] | None = None
                 ) -> list[tuple[float, float, dict[int, int]]]:
    """Per seed, over the `window` steps after the bucket of batch 4 leaves the prior k=5:
    (share of its steps explored, tokens/s over fixed k=2's on the noise-free clock, the
    step at which k=5 had 1, 4 and 8 pairs). `then`: the traffic the engine turns to at the
    switch."""
    best = fixed_rate(2, 4, steps=100000, **TEXT)
    found = []
    for seed in range(seeds):
        controller = ScheduleController([5] * 65, K_SET)
        engine = Passages(seed, [5] * 65, 4, counts=True, **TEXT)
        start = None
        tokens = seconds = 0.0
        marks: dict[int, int] = {}
        for t in range(20000):
            step = engine.step(4)
            engine.write(controller.observe(step))
            state = controller.buckets.get(bucket(4))
            if start is None and state is not None and state.incumbent != 5:
                start, before = t, (state.steps, state.explore_steps)
                for name, value in (then or {}).items():
                    setattr(engine, name, value)
            elif start is not None and state is not None:
                tokens += step.tokens
                seconds += engine.seconds(4, step.drafted)
                for mark in (1, 4, 8):
                    if state.arms[5].pairs >= mark and state.incumbent == 2:
                        marks.setdefault(mark, t - start)
                if t - start >= window:
                    break
        assert start is not None and state is not None, seed
        found.append(((state.explore_steps - before[1]) / (state.steps - before[0]),
                      tokens / seconds / best, marks))
    return found


def test_losing_arms_are_paced_by_their_loss_right_after_a_switch():
    """In the 150 steps after the switch to k=2 (40 seeds), the median share explored is at
    most 15% and the controller makes at least 0.982 of fixed k=2's tokens/s (median);
    measured 5.2% and 0.9878 (over 300 steps 7.4% and 0.9868; over 2000, 7.2% and 0.9968)."""
    runs = after_switch(40, 150)
    assert statistics.median(r[0] for r in runs) <= 0.15
    assert statistics.median(r[1] for r in runs) >= 0.982


def test_losing_arms_at_the_first_pace_after_a_switch_mutant_fails(monkeypatch):
    """Every arm restarted at `explore_every`: 45% of the first 150 steps explored, 0.9757 of
    fixed k=2 (median, measured; over 300 steps 26.7% and 0.9796; over 2000, 9.2% and
    0.9973: the saving is in the steps right after the switch, which short runs are made of)."""
    monkeypatch.setattr(schedule_control, "restart_after_switch", first_pace)
    runs = after_switch(40, 150)
    assert statistics.median(r[0] for r in runs) > 0.3
    assert statistics.median(r[1] for r in runs) < 0.982


def test_a_reversal_right_at_the_switch_is_still_looked_at():
    """What the carried level costs: the traffic turns to long passages at the very switch
    (k=5 then 4.2% ahead of k=2). The old incumbent is looked at again within 400 steps on
    every one of 40 seeds and has 8 pairs of its own (past `min_pairs`, where the CUSUM and
    the decision read them) within 2000 (measured: first pair median 130, at most 333;
    eighth median 679, at most 1639; at the first pace, the mutant: 39 / 45 and 252 / 432)."""
    runs = after_switch(40, 2500, {"short_share": 0.0})
    first = [r[2].get(1, math.inf) for r in runs]
    eighth = [r[2].get(8, math.inf) for r in runs]
    assert max(first) <= 400 and max(eighth) <= 2000, (first, eighth)


def arm(pairs: int, gain: float, sd: float) -> ArmEstimate:
    """An arm with `pairs` equal-weight pairs of mean `gain`, spread `sd`."""
    estimate = ArmEstimate()
    for i in range(pairs):
        estimate.add(gain + sd * (1 if i % 2 else -1), 1.0)
    return estimate


def test_the_old_incumbent_and_a_sure_loser_start_at_the_gap_their_loss_allows():
    """The winner at +8% (6 pairs), k=0 at -3% against the old incumbent: the old incumbent's
    level is 1 / (1 + the winner's lower bound) - 1 and k=0's (1 + its upper) / (1 + the
    winner's lower) - 1, each gap the loss over `explore_cost`; neither decides anything
    (no pairs) and both drop the level at their own `min_pairs` pairs."""
    arms = {0: arm(6, -0.03, 0.01), 2: arm(6, 0.08, 0.01), 5: ArmEstimate()}
    low = arms[2].bounds(P.pace_level)[0]
    zero_high = arms[0].bounds(P.pace_level)[1]
    restart_after_switch(arms, 5, 2, P)
    for k, level in ((5, 1.0 / (1.0 + low) - 1.0), (0, (1.0 + zero_high) / (1.0 + low) - 1.0)):
        estimate = arms[k]
        assert estimate.pairs == 0 and estimate.carried and estimate.moved == pytest.approx(level)
        assert estimate.gap == estimate.wait == estimate.held == round(-level / P.explore_cost)
        assert estimate.level(P.min_pairs, P.pace_level) == pytest.approx(level)
    assert arms[2].gap == P.explore_every and not arms[2].carried
    for _ in range(P.min_pairs):
        arms[5].judge(-0.07, 0.0, P.decay, P.alpha, P.margin, P.min_pairs, P.back_off)
    assert not arms[5].carried and arms[5].moved is None and arms[5].held == 0


@pytest.mark.parametrize("case", ["winner unsure", "arm unsure", "arm may win"])
def test_an_arm_without_a_sure_loss_restarts_at_the_first_pace(case):
    """The winner below `min_pairs` pairs (a switch carried from another bucket), an arm
    below them, or an arm whose level is above -margin: `explore_every`, no level."""
    winner = arm(2 if case == "winner unsure" else 6, 0.08, 0.01)
    other = arm(2, -0.2, 0.01) if case == "arm unsure" else arm(6, 0.07 if case ==
                                                                "arm may win" else -0.2, 0.01)
    arms = {0: other, 2: winner, 5: ArmEstimate()}
    restart_after_switch(arms, 5, 2, P)
    assert arms[0].gap == arms[0].wait == P.explore_every and arms[0].moved is None
    if case == "winner unsure":
        assert arms[5].gap == P.explore_every and not arms[5].carried

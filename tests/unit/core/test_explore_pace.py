"""k=0's level read from the incumbent's yield (core/explore_pace.py `YieldLevel`,
`zero_level`, `early_look`): at batch 1 a block of six steps yields 1 or 6 tokens a step, so a
block's mean yield says little and the level is read over tens of blocks, at an upper bound.
Seeds fixed."""

from __future__ import annotations

import random

import pytest
from support.passages import Passages
from test_schedule_control_noise import K_SET, PRIOR, Traffic

from vllm_specdec_plugin.core import explore_pace
from vllm_specdec_plugin.core.arm_stats import ArmEstimate, block_var
from vllm_specdec_plugin.core.explore_pace import YieldLevel, early_look, zero_level
from vllm_specdec_plugin.core.schedule_control import ControllerParams, ScheduleController


def block(rng: random.Random, accept: float, k: int = 5, steps: int = 6) -> float:
    """A block's mean yield per row step at batch 1: each step 1 or 1 + k tokens."""
    return sum(1 + (k if rng.random() < accept else 0) for _ in range(steps)) / steps


def test_the_level_follows_a_drop_to_no_acceptance_within_tens_of_blocks():
    """2000 blocks at 11.6% of steps accepting (k=5 1.4x k=0 at batch 1: mean yield 1.58),
    then none, on 20 seeds: before, the level's upper bound is above the mean on 95% of blocks
    or more (a one-sided bound at 2 standard errors, 97.7% for normal means; measured 96.7% on
    these skewed ones) and above 1.2 (k=0's break-even near 1.1) on every block (measured at
    least 1.376); after, it is below 1.2 within 60 blocks on every seed (measured 34-52)."""
    floor = block_var(0.116, 100.0, 5, 6)
    above = total = 0
    for seed in range(20):
        rng, level = random.Random(seed), YieldLevel()
        for _ in range(2000):
            bound = level.add(block(rng, 0.116), floor)
            if bound is not None:
                above += bound > 1.58
                total += 1
                assert bound > 1.2, seed
        assert any((level.add(block(rng, 0.0), floor) or 9.0) < 1.2 for _ in range(60)), seed
    assert above >= 0.95 * total, above / total


def test_zero_level_scales_k0s_gain_by_the_incumbents_yield():
    assert zero_level(-0.28, 1.58, 1.0) == pytest.approx(0.72 * 1.58 - 1.0)  # now k=0 wins
    assert zero_level(-0.70, 3.3, 3.3) == pytest.approx(-0.70)  # the same traffic
    assert zero_level(-0.5, 0.0, 1.0) is None and zero_level(-0.5, 2.0, 0.0) is None


def losing_zero(wait: int) -> ArmEstimate:
    """k=0 at -28% over 20 pairs against an incumbent that yielded 1.58, next look in `wait`."""
    zero = ArmEstimate(gap=96, wait=wait)
    for i in range(20):
        zero.add(-0.28 + 0.02 * (i % 3 - 1), 0.99, 0.0, 1.58)
    return zero


def test_k0_is_looked_at_early_once_per_rise_and_only_when_its_look_is_far_off():
    params = ControllerParams()
    zero = losing_zero(90)
    assert early_look(zero, 1.58, False, params) == (True, False)  # a loss at this yield: armed
    assert early_look(zero, 1.0, True, params) == (False, True)  # risen: restarted, looked at
    assert zero.pairs == 0 and zero.wait == params.explore_every
    assert zero.moved == pytest.approx(0.72 * 1.58 - 1.0, abs=0.01)
    zero = losing_zero(90)
    assert early_look(zero, 1.0, False, params) == (False, False)  # not armed: no second look
    zero = losing_zero(10)  # a look due soon anyway: none early, still armed
    assert early_look(zero, 1.0, True, params) == (True, False) and zero.pairs == 20


def early_looks(engine: Traffic | Passages, steps: int = 20000) -> int:
    controller = ScheduleController(PRIOR, K_SET)
    engine.run(controller, 1, steps)
    return controller.buckets[1].early_looks


def test_no_early_look_where_k5_yields_a_little_more_than_k0():
    """Open-ended text at batch 1 (k=5 7% ahead of k=0, k=2 6%), 8 seeds of 20000 steps: k=5's
    yield (about 1.07) never reads as k=0's level (its pairs say -7%), so k=0 keeps the pace its
    loss sets. Read at the level's mean instead of its upper bound (`LEVEL_Z` 0, the mutant
    below), 28 early looks, each restarting k=0's evidence."""
    assert sum(early_looks(Traffic(seed, {2: 1.06, 5: 1.07}, 1)) for seed in range(8)) == 0


def test_early_looks_at_the_mean_mutant_fails(monkeypatch):
    monkeypatch.setattr(explore_pace, "LEVEL_Z", 0.0)
    assert sum(early_looks(Traffic(seed, {2: 1.06, 5: 1.07}, 1)) for seed in range(8)) >= 10


def test_passages_and_free_text_inside_one_traffic_are_not_a_change():
    """Input-grounded text at batch 1 (free spells of 30 tokens, passages of 60: k=5 2.2x k=0):
    free-text spells of a few blocks average out in the level, so no early look in 8 seeds of
    20000 steps, and k=0 runs at most 1.2% of the steps (measured 0.7-1.0%). A CUSUM on the
    blocks (the first version of this watch, c0cb490) read each spell as a change: 40-56 early
    looks a seed, k=0 at 5-7% of the steps; a level over about 5 blocks read at its mean
    (`LEVEL_DECAY` 0.8, `LEVEL_WARM` 4, `LEVEL_Z` 0) 1-5 early looks a seed."""
    for seed in range(8):
        engine = Passages(seed, list(PRIOR), 32, 30.0, 60.0)
        assert early_looks(engine) == 0, seed
        assert engine.steps_at[0] <= 0.012 * 20000, (seed, engine.steps_at)


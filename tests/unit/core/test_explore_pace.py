"""The incumbent's yield watched for a change of traffic (core/explore_pace.py `YieldShift`,
`zero_level`): at batch 1 a block of six steps yields 1 or 6 tokens a step, so a drop from
11.6% of rows accepting five drafts to none moves a block's mean by under one of its standard
deviations. Seeds fixed."""

from __future__ import annotations

import random

import pytest

from vllm_specdec_plugin.core.arm_stats import block_var
from vllm_specdec_plugin.core.explore_pace import YieldShift, zero_level


def block(rng: random.Random, accept: float, k: int = 5, steps: int = 6) -> float:
    """A block's mean yield per row step at batch 1: each step 1 or 1 + k tokens."""
    return sum(1 + (k if rng.random() < accept else 0) for _ in range(steps)) / steps


def test_a_steady_yield_is_not_a_change():
    """Every block alike (every draft accepted: no spread, floor 0): nothing moves. (A block
    equal to the mean once read as +3.5 standard deviations where the spread was 0.)"""
    watch = YieldShift()
    assert all(watch.add(6.0, 0.0) is None for _ in range(2000))


def test_a_drop_to_no_acceptance_is_seen_in_tens_of_blocks():
    """2000 blocks at 11.6% (k=5 1.4x k=0 at batch 1), then none accepted, on 40 seeds: at most
    4 false alarms per 1000 blocks before (measured 2.3: each costs one look at k=0 at most)
    and the drop seen within 30 blocks on 34 seeds or more (measured 38; a
    false alarm just before the drop can leave the mean near the new level)."""
    floor = block_var(0.116, 100.0, 5, 6)
    false = seen = 0
    for seed in range(40):
        rng, watch = random.Random(seed), YieldShift()
        false += sum(watch.add(block(rng, 0.116), floor) is not None for _ in range(2000))
        seen += any(watch.add(block(rng, 0.0), floor) is not None for _ in range(30))
    assert false <= 4 * 40 * 2, false
    assert seen >= 34, seen


@pytest.mark.parametrize(("rate", "step_time", "after", "expected"), [
    (1.0 / 0.9, 1.0, 1.0, 1.0 / 0.9 - 1.0),  # the incumbent accepts nothing: k=0 wins 11%
    (1.0 / 0.9, 1.0, 3.3, 1.0 / (0.9 * 3.3) - 1.0),  # 3.3 tokens a step: k=0 loses 66%
    (0.0, 1.0, 1.0, None), (1.0, 0.0, 1.0, None), (1.0, 1.0, 0.0, None),  # not measured yet
])
def test_zero_level_is_k0s_rate_over_the_incumbents(rate, step_time, after, expected):
    level = zero_level(rate, step_time, after)
    assert level == (None if expected is None else pytest.approx(expected))

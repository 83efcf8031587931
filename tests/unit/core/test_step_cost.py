"""The step-cost table (`core/step_cost.py`): buckets, the baseline, the fitted extra cost."""

from __future__ import annotations

import random

import numpy as np
import pytest

from vllm_specdec_plugin.core.step_cost import (
    STEP_COST_DEFAULTS,
    StepCostParams,
    StepCostTable,
    bucket,
    bucket_bounds,
    bucket_label,
    captured_ks,
)


def test_buckets_have_inclusive_bounds_and_labels():
    assert [bucket_bounds(k) for k in (1, 2, 3, 4)] == [(1, 1), (2, 3), (4, 7), (8, 15)]
    assert [bucket_label(k) for k in (1, 2, 3, 5)] == ["1-1", "2-3", "4-7", "16-31"]
    for rows in range(1, 300):
        low, high = bucket_bounds(bucket(rows))
        assert low <= rows <= high
    with pytest.raises(ValueError):
        bucket_bounds(0)


def test_cost_table_wants_a_baseline_first_and_again_when_stale():
    table = StepCostTable()
    assert table.wants_baseline(4) and table.seconds(4, np.array([0, 4])) is None
    table.observe(4, 0, 0.1)
    assert not table.wants_baseline(5)  # same bucket (4-7)
    assert table.wants_baseline(8)       # another bucket
    for _ in range(STEP_COST_DEFAULTS.baseline_every):
        table.observe(4, 6, 0.13)
    assert table.wants_baseline(4)
    assert bucket(1) == 1 and bucket(3) == 2 and bucket(4) == bucket(7) == 3


def test_cost_table_recovers_baseline_switch_and_per_token_cost():
    table = StepCostTable()
    rng = random.Random(0)
    for _ in range(600):
        drafted = rng.choice([0, 0, 2, 5, 9, 14])
        seconds = 0.08 + (0.004 + 0.002 * drafted if drafted else 0.0)
        table.observe(16, drafted, seconds * (1 + rng.uniform(-0.02, 0.02)))
    assert table.baseline(16) == pytest.approx(0.08, rel=0.05)
    fit = table.extra(16)
    assert fit is not None
    switch, per_token = fit
    assert per_token == pytest.approx(0.002, rel=0.2)
    assert switch == pytest.approx(0.004, abs=0.002)
    predicted = table.seconds(16, np.array([0, 10]))
    assert predicted is not None and predicted[1] == pytest.approx(0.104, rel=0.08)


def test_cost_table_without_drafting_steps_uses_the_prior_shape():
    table = StepCostTable()
    for _ in range(20):
        table.observe(32, 0, 0.1)
    fit = table.extra(32)
    assert fit is not None and fit[1] > 0 and fit[0] >= 0


@pytest.mark.parametrize("first", [1.0, 0.0004])  # a stall (a JIT compile), a fast outlier
def test_a_fit_follows_the_baseline_it_was_made_from(first):
    """The prior is in the baseline's seconds: a fit kept from the first, outlying no-draft
    cycle priced drafting out for good (no drafting cycle, so no refit: a CI run drafted
    nothing in 480 cycles of copying text). Steady cycles later, the fit is the prior's shape
    around the baseline they measured."""
    table = StepCostTable()
    table.observe(2, 0, first)
    assert table.seconds(2, np.array([0, 4])) is not None  # a plan made at once
    for _ in range(40):
        table.observe(2, 0, 0.004)
    predicted = table.seconds(2, np.array([0, 4]))
    fresh = StepCostTable()
    for _ in range(40):
        fresh.observe(2, 0, table.baseline(2))
    expected = fresh.seconds(2, np.array([0, 4]))
    assert predicted is not None and expected is not None
    assert predicted == pytest.approx(expected, rel=0.02)


def test_a_no_draft_cycle_far_below_a_stalled_baseline_restarts_it():
    table = StepCostTable()
    table.observe(2, 0, 1.0)  # the first cycle, stalled
    table.observe(2, 0, 0.004)
    assert table.baseline(2) == pytest.approx(0.004)
    table.observe(2, 0, 0.005)  # within the ratio: averaged
    assert table.baseline(2) == pytest.approx(0.004 + STEP_COST_DEFAULTS.base_weight * 0.001)


def test_a_drafting_cycle_measured_against_a_stalled_baseline_is_no_sample():
    table = StepCostTable()
    table.observe(2, 0, 1.0)
    table.observe(2, 4, 0.005)  # its extra would be -0.995 s
    assert table.summary()["rows>=2"]["drafting_samples"] == 0
    table.observe(2, 0, 0.004)
    table.observe(2, 4, 0.005)
    assert table.summary()["rows>=2"]["drafting_samples"] == 1


def test_cost_table_reads_its_params():
    table = StepCostTable(StepCostParams(baseline_every=2))
    table.observe(4, 0, 0.1)
    table.observe(4, 6, 0.13)
    assert not table.wants_baseline(4)
    table.observe(4, 6, 0.13)
    assert table.wants_baseline(4)


@pytest.mark.parametrize(("high", "ceiling", "keep", "expected"), [
    (1, None, 5, (0, 2, 5)),  # no graphs (CPU, enforce_eager): every k
    (63, 512, 2, (0, 2, 5)),  # (1 + 5) * 63 = 378 fits
    (127, 512, 2, (0, 2)),  # k=5 at 127 is 762 tokens: eager, not explored
    (255, 512, 0, (0,)),  # k=2 is 765: eager too
    (255, 512, 5, (0, 5)),  # the prior stays: it is what the fixed table runs anyway
])
def test_only_k_whose_decode_graph_was_captured_are_explored(high, ceiling, keep, expected):
    assert captured_ks((0, 2, 5), high, ceiling, keep) == expected

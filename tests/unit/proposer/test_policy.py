"""The adaptive proposer's pure parts: acceptance, step costs, the plan and the controller.

The proposer class driven like the model runner drives it is in test_proposer.py; the engine
behaviour (tokens, counters, mixed sampling) in tests/engine/test_adaptive.py.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.examples import examples

from vllm_specdec_plugin.proposer.acceptance import (
    Calibration,
    PooledAcceptance,
    RowEvidence,
    bucket_counts,
    position_bucket,
    strength_band,
    token_values,
)
from vllm_specdec_plugin.proposer.control import DraftController
from vllm_specdec_plugin.proposer.params import ADAPTIVE_PARAMS
from vllm_specdec_plugin.proposer.policy import outcome, plan_draft_lengths


def linear(fixed: float, per_token: float, switch: float):
    """A step-cost function of drafted tokens at a given batch (what `StepCostTable.seconds`
    returns), for planning tests."""
    def cost(rows: int):
        return lambda d: fixed + per_token * (rows + d) + np.where(d > 0, switch, 0.0)
    return cost


CPU_LIKE = linear(0.055, 0.0035, 0.002)  # SmolLM2 on 2 cores


# -- outcome and acceptance -------------------------------------------------------------------

def test_outcome_counts_the_accepted_prefix_then_one_miss():
    assert outcome([1, 2, 3], [1, 2, 9]) == (2, 1)
    assert outcome([1, 2, 3], [1, 2, 3, 4]) == (3, 0)   # all accepted, bonus after
    assert outcome([1, 2, 3], [1]) == (1, 0)            # only one position verified
    assert outcome([5], [7]) == (0, 1)                  # a shadow candidate that missed
    assert outcome([], [7]) == (0, 0)


def test_positions_fall_into_buckets_and_outcomes_count_per_bucket():
    assert [position_bucket(p) for p in (1, 2, 3, 4, 5, 8, 9, 30)] == [0, 1, 2, 2, 3, 3, 4, 4]
    assert bucket_counts(0, 1) == [(0, 0, 1)]
    assert bucket_counts(3, 1) == [(0, 1, 1), (1, 1, 1), (2, 1, 2)]  # 1, 2, 3 hit; 4 missed
    assert bucket_counts(10, 0) == [(0, 1, 1), (1, 1, 1), (2, 2, 2), (3, 4, 4), (4, 2, 2)]
    total = bucket_counts(10, 0)
    assert sum(a for _, a, _ in total) == 10 and sum(t for _, _, t in total) == 10


def test_a_candidate_counted_in_pieces_counts_as_counted_whole():
    """A shadow followed over cycles: positions 1..a, then a+1..b, then the miss."""
    for a in range(0, 12):
        for b in range(a, 14):
            for miss in (0, 1):
                whole: dict[int, list[int]] = {}
                for index, accepted, trials in bucket_counts(b, miss):
                    whole[index] = [accepted, trials]
                pieces: dict[int, list[int]] = {}
                for index, accepted, trials in (bucket_counts(a, 0)
                                                + bucket_counts(b, miss, start=a)):
                    cell = pieces.setdefault(index, [0, 0])
                    cell[0] += accepted
                    cell[1] += trials
                assert pieces == whole, (a, b, miss)


def test_suffix_strength_has_bands_ngram_one():
    assert strength_band("suffix", 0.2) == 0
    assert strength_band("suffix", 0.6) == 1
    assert strength_band("suffix", 0.95) == 2
    assert strength_band("ngram", 0.95) == 0


def test_pooled_rates_learn_per_feature_and_report_what_they_expected():
    pooled = PooledAcceptance()
    copying, guessing = ("ngram", 0, True), ("ngram", 0, False)
    assert pooled.rates(copying) == ADAPTIVE_PARAMS.prior_rate
    for _ in range(200):
        pooled.observe(copying, 8, 0)
        pooled.observe(guessing, 0, 1)
    assert pooled.rates(copying)[0] > 0.95 and pooled.rates(copying)[3] > 0.95
    assert pooled.rates(guessing)[0] < 0.05
    # later positions of `guessing` were never observed: they keep the prior
    assert pooled.rates(guessing)[3] == pytest.approx(ADAPTIVE_PARAMS.prior_rate[3])
    expected = pooled.observe(copying, 2, 1)  # 3 trials at rates near 1
    assert 2.8 < expected <= 3.0


def test_row_evidence_is_shrunk_towards_the_pool():
    row = RowEvidence()
    assert row.factor("ngram") == 1.0
    row.observe("ngram", 0, 0.5, full=False)
    assert 0.7 < row.factor("ngram") < 1.0   # one miss moves it a little
    for _ in range(20):
        row.observe("ngram", 0, 0.5, full=False)
    assert row.factor("ngram") < 0.7


def test_calibration_removes_a_constant_overestimate_within_its_range():
    calibration = Calibration()
    assert calibration.factor("suffix") == 1.0
    for _ in range(500):
        calibration.observe("suffix", predicted=4.0, realised=2)
    assert calibration.factor("suffix") == pytest.approx(0.5, rel=0.05)
    for _ in range(500):
        calibration.observe("ngram", predicted=1.0, realised=0)
    assert calibration.factor("ngram") == 0.2  # the floor


def test_token_values_fall_with_position_and_respect_the_limit():
    values = token_values((0.9, 0.9, 0.9, 0.9, 0.9), 1.0, 6)
    assert len(values) == 6 and values == sorted(values, reverse=True)
    assert values[0] == pytest.approx(0.9) and values[5] == pytest.approx(0.9 ** 6)
    assert max(token_values((0.9,) * 5, 10.0, 4)) < 1.0  # capped below certainty


# -- the plan ---------------------------------------------------------------------------------

def plan(values, rows, cost=CPU_LIKE, margin=0.0):
    return plan_draft_lengths(values, rows, cost(rows), margin)


def geometric(first: float, later: float, limit: int) -> list[float]:
    out, value = [], first
    for _ in range(limit):
        out.append(value)
        value *= later
    return out


def test_batch_one_drafts_long_when_accepting():
    assert plan([geometric(0.9, 0.9, 16)], 1)[0] >= 10


def test_saturated_batch_of_open_ended_rows_drafts_nothing():
    assert sum(plan([geometric(0.35, 0.35, 16)] * 32, 32)) == 0


def test_saturated_batch_keeps_drafting_for_rows_that_copy():
    values = [geometric(0.97, 0.97, 16)] * 4 + [geometric(0.3, 0.3, 16)] * 28
    lengths = plan(values, 32)
    assert all(length >= 3 for length in lengths[:4])
    assert sum(lengths[4:]) == 0


def test_more_load_means_shorter_drafts():
    at = {rows: plan([geometric(0.8, 0.8, 16)] * rows, rows)[0] for rows in (1, 4, 16, 32)}
    assert at[1] >= at[4] >= at[16] >= at[32]
    assert at[1] > at[32]


def test_no_measurement_or_no_candidate_means_no_draft():
    assert plan_draft_lengths([geometric(0.99, 0.99, 8)], 1, lambda d: None) == [0]
    assert plan([[], []], 2) == [0, 0]


def test_switch_cost_and_margin_stop_a_marginal_draft():
    costly = linear(0.01, 0.001, 0.01)
    assert plan([[0.5]], 8, cost=costly) == [0]
    # a draft that pays 3% on paper is dropped at a 5% margin, kept at none
    barely = linear(0.1, 0.0, 0.0)
    assert plan([[0.03]], 1, cost=barely, margin=0.0) == [1]
    assert plan([[0.03]], 1, cost=barely, margin=0.05) == [0]


def reference_plan(values, rows, seconds, margin=0.0):
    """The plan written out token by token (the first implementation, kept as the reference
    for the vectorised one)."""
    lengths = [0] * len(values)
    flat = [(value, row) for row, row_values in enumerate(values) for value in row_values
            if value > 0.0]
    if not flat:
        return lengths
    flat.sort(key=lambda item: -item[0])
    times = seconds(np.arange(len(flat) + 1, dtype=np.float64))
    if times is None:
        return lengths
    tokens = rows + np.concatenate(([0.0], np.cumsum([value for value, _ in flat])))
    rates = tokens / times
    best = int(np.argmax(rates[1:])) + 1
    if rates[best] <= (1.0 + margin) * rates[0]:
        return lengths
    for _, row in flat[:best]:
        lengths[row] += 1
    return lengths


row_values = st.lists(st.floats(0.0, 1.0, allow_nan=False), max_size=16).map(
    lambda values: sorted(values, reverse=True))


@settings(max_examples=examples(300), deadline=1000)
@given(values=st.lists(row_values, max_size=40), fixed=st.floats(0.001, 0.5),
       per_token=st.floats(0.0, 0.01), switch=st.floats(0.0, 0.05),
       margin=st.floats(0.0, 0.3))
def test_the_plan_equals_its_token_by_token_reference(values, fixed, per_token, switch,
                                                      margin):
    rows = max(len(values), 1)
    seconds = linear(fixed, per_token, switch)(rows)
    assert plan_draft_lengths(values, rows, seconds, margin) == reference_plan(
        values, rows, seconds, margin)


# -- the controller ---------------------------------------------------------------------------

def test_margin_rises_while_drafting_loses_and_falls_while_it_pays():
    controller = DraftController()
    start = controller.margin
    for _ in range(10):
        controller.drafted_cycle(0.9)
    assert controller.margin > start
    high = controller.margin
    for _ in range(40):
        controller.drafted_cycle(1.3)
    assert controller.margin < high
    assert controller.margin >= ADAPTIVE_PARAMS.margin_range[0]


def test_dormant_after_idle_cycles_then_awake_when_probes_would_draft():
    controller = DraftController()
    for _ in range(ADAPTIVE_PARAMS.dormant_after - 1):
        controller.planned(0)
    assert not controller.dormant
    controller.planned(0)
    assert controller.dormant and controller.counters["dormant_entries"] == 1
    probed = [row for row in range(64) if controller.probes(row)]
    assert len(probed) == 64 // ADAPTIVE_PARAMS.probe_every
    controller.planned(0)
    assert [row for row in range(64) if controller.probes(row)] != probed  # it rotates
    controller.planned(3)
    assert not controller.dormant and controller.counters["dormant_exits"] == 1
    assert [e["state"] for e in controller.events] == ["dormant", "awake"]
    assert all(controller.probes(row) for row in range(64))


def test_dormancy_is_never_one_way():
    controller = DraftController()
    for _ in range(ADAPTIVE_PARAMS.dormant_after):
        controller.planned(0)
    assert controller.dormant
    for _ in range(ADAPTIVE_PARAMS.wake_every):
        controller.planned(0)
    assert not controller.dormant
    assert controller.events[-1]["why"] == "periodic re-probe"


def test_losing_at_the_highest_margin_sends_it_to_sleep():
    controller = DraftController()
    for _ in range(100):
        controller.drafted_cycle(0.7)
    assert controller.margin == ADAPTIVE_PARAMS.margin_range[1]
    assert controller.log_speedup < math.log(0.8)
    controller.planned(4)
    assert controller.dormant

"""The predicted speedup (`core/speedup.py`): exact answers on hand-made counts and curves, the
bootstrap interval, monotone in acceptance, and what it recommends."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.examples import examples

from vllm_specdec_plugin.core.schedule import SCHEDULE_OPEN_END
from vllm_specdec_plugin.core.speedup import (
    Predicted,
    ReplayCounts,
    plain_step,
    predict,
    prior_share,
    recommend,
)
from vllm_specdec_plugin.core.step_cost import BucketCost, StepCostCurve, bucket_bounds

BATCHES = [1, 2, 4, 8, 16, 32]


def curve(no_draft: float = 0.01, switch: float = 0.0, per_token: float = 0.0,
          measured: tuple[int, ...] = tuple(range(1, 8))) -> StepCostCurve:
    """Buckets 1..7, each measured at its first batch size, so at a power of two the no-draft
    step is exactly `no_draft`."""
    buckets = {key: BucketCost(no_draft, switch, per_token, float(bucket_bounds(key)[0]))
               for key in range(1, 8)}
    return StepCostCurve(buckets, "hand-made", frozenset(measured))


def same(requests: int, output_tokens: int, steps: int, drafting: int,
         drafted: int) -> ReplayCounts:
    """`requests` identical requests."""
    return ReplayCounts(*(np.full(requests, v) for v in (output_tokens, steps, drafting,
                                                         drafted)))


def varied(requests: int, seed: int) -> ReplayCounts:
    """Requests whose tokens per step spread from 1 to 3 (k=3, every step drafts)."""
    rng = np.random.default_rng(seed)
    out = rng.integers(50, 200, requests)
    tau = rng.uniform(1.0, 3.0, requests)
    steps = np.maximum(1, np.round((out - 1) / tau)).astype(np.int64)
    return ReplayCounts(out, steps, steps, 3 * steps)


def test_tau_two_with_free_drafting_is_two():
    # 10 tokens after the first in 5 verify steps: tau = 2; drafting costs nothing
    found = predict(same(8, 11, 5, 5, 15), curve(), BATCHES)
    assert [p.batch for p in found] == BATCHES
    for p in found:
        assert p.speedup == pytest.approx(2.0, rel=1e-12)
        assert p.low == p.high == p.speedup  # identical requests: no spread


def test_per_token_cost_loses_at_high_batch():
    # tau 1.5, one drafted token per row per step, every step drafts; 1 ms per drafted token
    # against a 10 ms step: speedup(b) = 1.5 * 10 / (10 + b)
    found = predict(same(4, 16, 10, 10, 10), curve(per_token=0.001), BATCHES)
    assert [p.speedup for p in found] == pytest.approx([1.5 * 10 / (10 + b) for b in BATCHES])
    choice = recommend({"ngram k=1": found}, {"ngram k=1": 1})
    assert choice.break_point == 8  # 1.5 * 10 / 18 = 0.83
    assert choice.per_batch == ((1, "ngram k=1"), (2, "ngram k=1"), (4, "ngram k=1"),
                                (8, None), (16, None), (32, None))
    assert choice.schedule == [[1, 7, 1], [8, SCHEDULE_OPEN_END, 0]]
    assert (choice.best, choice.k, choice.num_speculative_tokens) == ("ngram k=1", 1, 1)


def test_switch_paid_by_the_share_of_steps_with_a_drafting_row():
    # half the steps draft (2 tokens each): at batch b a step drafts with 1 - 0.5**b
    counts = same(3, 13, 8, 4, 8)  # tau 1.5, d = 1 per row, p = 0.5
    found = predict(counts, curve(switch=0.004, per_token=0.0005), [1, 2, 4])
    for p, b in zip(found, [1, 2, 4], strict=True):
        t_spec = 0.01 + 0.004 * (1 - 0.5 ** b) + 0.0005 * b * 1.0
        assert p.speedup == pytest.approx(1.5 * 0.01 / t_spec, rel=1e-12)


def test_async_scheduling_of_the_plain_engine_prices_its_hidden_host_work():
    """The plain engine overlaps h of host work with its forward pass (async scheduling), the
    speculating one does not: the plain step is max(t - h, h), the interval moves with it."""
    counts = varied(200, 4)
    costs = curve(switch=0.0005, per_token=0.0004)
    sync, hidden = predict(counts, costs, BATCHES), predict(counts, costs, BATCHES, hidden_s=0.003)
    for a, b in zip(sync, hidden, strict=True):
        for x, y in ((a.speedup, b.speedup), (a.low, b.low), (a.high, b.high)):
            assert y == pytest.approx(x * 0.007 / 0.01, rel=1e-12)  # 10 ms step, 3 ms hidden
    assert plain_step(0.01, 0.0) == 0.01 and plain_step(0.01, 0.003) == pytest.approx(0.007)
    # host work longer than the forward pass: the step is the host's; never above t itself
    assert plain_step(0.01, 0.008) == pytest.approx(0.008)
    assert plain_step(0.01, 0.05) == 0.01 and plain_step(0.01, 0.005) == pytest.approx(0.005)
    for bad in (-0.001, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="hidden host seconds"):
            predict(counts, costs, [1], hidden_s=bad)


def test_no_steps_and_one_request_are_degenerate():
    (none,) = predict(same(5, 1, 0, 0, 0), curve(per_token=0.001), [4])
    assert none == Predicted(4, 1.0, 1.0, 1.0)  # nothing decoded: nothing to speed up
    (one,) = predict(varied(1, 0), curve(per_token=0.001), [4])
    assert one.low == one.high == one.speedup != 1.0


def test_interval_contains_the_point_and_narrows_with_more_requests():
    costs = curve(switch=0.0005, per_token=0.0004)
    few, many = predict(varied(20, 1), costs, BATCHES), predict(varied(2000, 1), costs, BATCHES)
    for small, large in zip(few, many, strict=True):
        assert small.low < small.speedup < small.high
        assert large.low < large.speedup < large.high
        assert large.high - large.low < 0.4 * (small.high - small.low)
    # one resample: a single draw is the interval, widened to hold the point
    for p in predict(varied(20, 1), costs, BATCHES, resamples=1, seed=3):
        assert p.low <= p.speedup <= p.high


def test_interval_is_deterministic_and_follows_the_confidence():
    counts, costs = varied(50, 2), curve(per_token=0.0004)
    assert predict(counts, costs, [4], seed=7) == predict(counts, costs, [4], seed=7)
    (narrow,), (wide,) = predict(counts, costs, [4], confidence=0.5), predict(counts, costs, [4])
    assert wide.low < narrow.low <= narrow.high < wide.high


@st.composite
def requests_and_more_accepted(draw: st.DrawFn) -> tuple[ReplayCounts, ReplayCounts]:
    """Counts, and the same counts with some more draft tokens accepted."""
    n = draw(st.integers(2, 12))
    steps = np.array(draw(st.lists(st.integers(1, 40), min_size=n, max_size=n)))
    drafted = np.array([draw(st.integers(0, 4 * s)) for s in steps])
    accepted = np.array([draw(st.integers(0, d)) for d in drafted])
    more = np.array([draw(st.integers(a, d)) for a, d in zip(accepted, drafted, strict=True)])
    drafting = np.minimum(steps, drafted)
    return (ReplayCounts(1 + steps + accepted, steps, drafting, drafted),
            ReplayCounts(1 + steps + more, steps, drafting, drafted))


@settings(derandomize=True, deadline=None, max_examples=examples(60))
@given(requests_and_more_accepted())
def test_more_acceptance_never_predicts_less(pair: tuple[ReplayCounts, ReplayCounts]):
    costs = curve(switch=0.002, per_token=0.0007)
    before, after = (predict(c, costs, [1, 4, 16], resamples=100) for c in pair)
    for b, a in zip(before, after, strict=True):
        assert a.speedup >= b.speedup - 1e-12
        assert a.low >= b.low - 1e-12 and a.high >= b.high - 1e-12  # same draws, same seed


def p(batch: int, speedup: float, low: float, high: float) -> Predicted:
    return Predicted(batch, speedup, low, high)


def test_recommend_picks_the_best_paying_option_per_batch():
    options = {
        # the highest point at batch 1, but its interval reaches below 1: not chosen
        "ngram k=5": [p(1, 1.9, 0.95, 2.6), p(2, 1.6, 1.2, 1.9), p(4, 0.9, 0.8, 1.0)],
        "ngram k=3": [p(1, 1.5, 1.3, 1.7), p(2, 1.3, 1.1, 1.4), p(4, 1.05, 1.01, 1.1)],
        "suffix k=8": [p(1, 1.7, 1.4, 2.0), p(2, 1.2, 1.05, 1.3), p(4, 0.95, 0.9, 1.0)],
    }
    k_of = {"ngram k=5": 5, "ngram k=3": 3, "suffix k=8": 8}
    method_of = {"ngram k=5": "ngram", "ngram k=3": "ngram", "suffix k=8": "suffix"}
    choice = recommend(options, k_of, method_of)
    assert choice.per_batch == ((1, "suffix k=8"), (2, "ngram k=5"), (4, "ngram k=3"))
    assert (choice.best, choice.k, choice.break_point) == ("suffix k=8", 8, None)
    # the schedule keeps to suffix (one config, one method): k=8 while it pays, then none
    assert choice.schedule == [[1, 3, 8], [4, SCHEDULE_OPEN_END, 0]]
    # without methods every option counts for the schedule
    assert recommend(options, k_of).schedule == [[1, 1, 8], [2, 3, 5],
                                                 [4, SCHEDULE_OPEN_END, 3]]


def test_recommended_schedules_are_what_vllm_accepts():
    from vllm.v1.spec_decode.dynamic.utils import build_dynamic_sd_schedule_lookup

    options = {"a": [p(2, 1.5, 1.2, 1.8), p(8, 1.2, 1.1, 1.3), p(32, 1.1, 1.01, 1.2),
                     p(128, 0.9, 0.8, 1.0)],
               "b": [p(2, 1.4, 1.3, 1.5), p(8, 1.3, 1.2, 1.4), p(32, 0.9, 0.8, 1.0),
                     p(128, 0.8, 0.7, 0.9)]}
    choice = recommend(options, {"a": 4, "b": 2})
    assert choice.schedule == [[1, 7, 4], [8, 31, 2], [32, 127, 4],
                               [128, SCHEDULE_OPEN_END, 0]]
    lookup = build_dynamic_sd_schedule_lookup(choice.schedule, 256,
                                              choice.num_speculative_tokens)
    assert (lookup[1], lookup[7], lookup[8], lookup[31], lookup[32], lookup[128]) == (
        4, 4, 2, 2, 4, 0)


def test_recommend_ties_and_nothing_paying():
    tie = {"x k=5": [p(1, 1.4, 1.1, 1.6)], "x k=2": [p(1, 1.4, 1.2, 1.5)]}
    assert recommend(tie, {"x k=5": 5, "x k=2": 2}).best == "x k=2"  # the cheaper k
    losing = {"x k=2": [p(1, 1.1, 0.9, 1.3), p(4, 0.8, 0.7, 0.9)]}
    choice = recommend(losing, {"x k=2": 2})
    assert (choice.best, choice.k, choice.break_point, choice.schedule) == (None, 0, 1, None)
    assert choice.num_speculative_tokens == 0


def test_prior_share_counts_batches_priced_from_a_prior():
    costs = curve(measured=(1, 2))  # buckets 1 (batch 1) and 2 (batches 2-3) measured
    assert prior_share(costs, [1, 2, 4, 8]) == 0.5
    assert prior_share(costs, [1, 3]) == 0.0
    assert prior_share(curve(measured=()), BATCHES) == 1.0


def test_counts_of_a_replay_result_and_bad_arguments():
    result = SimpleNamespace(output_tokens=np.array([11]), steps=np.array([5]),
                             drafting_steps=np.array([5]), drafted=np.array([15]),
                             accepted=np.array([5]))
    assert predict(ReplayCounts.of(result), curve(), [1])[0].speedup == pytest.approx(2.0)
    with pytest.raises(ValueError, match="equal-length"):
        ReplayCounts(np.ones(2), np.ones(3), np.ones(2), np.ones(2))
    with pytest.raises(ValueError, match="negative"):
        ReplayCounts(np.ones(2), -np.ones(2), np.ones(2), np.ones(2))
    counts = same(2, 11, 5, 5, 15)
    for kwargs in ({"confidence": 1.0}, {"resamples": 0}):
        with pytest.raises(ValueError):
            predict(counts, curve(), [1], **kwargs)
    with pytest.raises(ValueError, match="batch sizes start at 1"):
        predict(counts, curve(), [0])
    with pytest.raises(ValueError, match="must take some time"):
        predict(counts, curve(no_draft=0.0), [1])

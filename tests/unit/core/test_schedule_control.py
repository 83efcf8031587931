"""The online schedule controller's estimator (core/schedule_control.py) on synthetic engines:
step costs and tokens per step per k, with ±10% noise per step and a slowly drifting host."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.examples import examples

from vllm_specdec_plugin.core.schedule_control import (
    ControllerParams,
    ScheduleController,
    Step,
)
from vllm_specdec_plugin.core.step_cost import bucket, bucket_bounds
from vllm_specdec_plugin.core.switchback import Switchback, parse_arms

K_SET = (0, 2, 5)
# vLLM's lookup for the schedule [[1, 4, 5], [5, 8, 2], [9, 64, 0]] (index = batch size).
PRIOR = [5] + [5] * 4 + [2] * 4 + [0] * 56


class Engine:
    """A synthetic engine: per k, a step's seconds and tokens per request (means), with noise
    and a drift of the host's speed that both arms share."""

    def __init__(self, seconds: dict[int, float], tokens: dict[int, float], noise: float,
                 seed: int, drift: float = 0.1) -> None:
        self.seconds, self.tokens, self.noise = seconds, tokens, noise
        self.rng = random.Random(seed)
        self.drift = drift
        self.t = 0
        self.lookup = list(PRIOR)
        self.steps_at: dict[int, int] = {}

    def step(self, batch: int) -> Step:
        k = self.lookup[batch]
        self.t += 1
        speed = 1.0 + self.drift * math.sin(self.t / 80.0)
        wobble = 1.0 + self.rng.uniform(-self.noise, self.noise)
        seconds = self.seconds[k] * speed * wobble
        mean = batch * self.tokens[k] * (1.0 + self.rng.uniform(-self.noise, self.noise))
        tokens = batch if k == 0 else max(batch, int(mean) + (self.rng.random() < mean - int(mean)))
        self.steps_at[k] = self.steps_at.get(k, 0) + 1
        return Step(batch, k, seconds, tokens, batch * k)

    def write(self, change: tuple[int, int] | None) -> None:
        if change is None:
            return
        key, k = change
        low, high = bucket_bounds(key)
        for b in range(low, min(high, len(self.lookup) - 1) + 1):
            self.lookup[b] = k

    def run(self, target, batch: int, steps: int) -> None:
        for _ in range(steps):
            self.write(target.observe(self.step(batch)))


def rates(best: int, edge: float) -> tuple[dict[int, float], dict[int, float]]:
    """Step seconds and tokens per request per k such that `best` beats every other k by at
    least `edge` of tokens/s (k=0: one token per request; a drafting k at least one)."""
    seconds = {0: 0.10, 2: 0.115, 5: 0.13}
    rate0 = 1.0 / seconds[0]
    factor = {k: (1.0 + edge) if k == best else 1.0 for k in K_SET}
    if best == 0:
        factor = {k: 1.0 if k == 0 else 1.0 / (1.0 + edge) for k in K_SET}
    tokens = {k: 1.0 if k == 0 else max(1.0, rate0 * factor[k] * seconds[k]) for k in K_SET}
    return seconds, tokens


# Statistical properties: examples drawn from a fixed seed (derandomize), so CI sees the same
# ones every run; each asserts what must hold on nearly every draw of the noise.
STATISTICAL = settings(max_examples=examples(40), deadline=None, derandomize=True)


@STATISTICAL
@given(best=st.sampled_from(K_SET), edge=st.floats(0.06, 0.5), seed=st.integers(0, 10**6),
       batch=st.sampled_from([1, 3, 6, 12, 32]))
def test_it_picks_the_true_best_k_under_ten_percent_noise(best, edge, seed, batch):
    """±10% noise on each step's time and tokens; at batch 1-3 a step's tokens are whole
    numbers (one or two per request), noise far above 10%, so there the edge is at least 15%."""
    edge = edge if batch >= 6 else max(edge, 0.15)
    seconds, tokens = rates(best, edge)
    controller = ScheduleController(PRIOR, K_SET)
    engine = Engine(seconds, tokens, noise=0.10, seed=seed)
    engine.run(controller, batch, 3000)
    assert controller.table()[bucket(batch)] == best
    assert engine.lookup[batch] in K_SET


@settings(max_examples=examples(40), deadline=None)
@given(seed=st.integers(0, 10**6), batch=st.integers(1, 64),
       weights=st.lists(st.floats(0.3, 3.0), min_size=3, max_size=3))
def test_it_never_schedules_a_k_outside_the_schedule(seed, batch, weights):
    seconds = {k: 0.1 * (1 + k / 10) for k in K_SET}
    tokens = dict(zip(K_SET, weights, strict=True))
    controller = ScheduleController(PRIOR, K_SET)
    engine = Engine(seconds, tokens, noise=0.3, seed=seed)
    engine.run(controller, batch, 600)
    assert set(engine.steps_at) <= set(K_SET)
    assert set(controller.table().values()) <= set(K_SET)


@STATISTICAL
@given(best=st.sampled_from(K_SET), seed=st.integers(0, 10**6), batch=st.sampled_from([1, 16, 32]))
def test_exploration_stays_within_its_budget_once_learned(best, seed, batch):
    seconds, tokens = rates(best, 0.25)
    controller = ScheduleController(PRIOR, K_SET)
    engine = Engine(seconds, tokens, noise=0.10, seed=seed)
    engine.run(controller, batch, 4000)
    state = controller.buckets[bucket(batch)]
    steps, explored = state.steps, state.explore_steps
    engine.run(controller, batch, 6000)
    share = (state.explore_steps - explored) / (state.steps - steps)
    # Two losing arms, each explored one block in 96 once found clearly worse. Not on every
    # draw: an arm whose CUSUM the host's drift takes half way up is explored at the first pace
    # until it settles (seed 10451, batch 32, best 2: 3.4%, drawn in another worker's pool of
    # constants before `support.examples.fix_draws`).
    assert share <= 2 / 96 + 0.01


def test_a_neutral_k_leaves_the_prior_in_place():
    """No arm beats the prior: the table keeps the prior, never switching, at the 10% noise
    the other tests use (a switch needs its interval, not only its mean, past the margin)."""
    seconds = {0: 0.1, 2: 0.12, 5: 0.15}
    tokens = {k: seconds[k] * 10.0 for k in K_SET}  # every k the same tokens/s
    for seed in range(10):
        controller = ScheduleController(PRIOR, K_SET)
        engine = Engine(seconds, tokens, noise=0.10, seed=seed)
        engine.run(controller, 32, 3000)
        assert controller.table()[bucket(32)] == 0
        assert controller.buckets[bucket(32)].switches == 0


def test_gain_reports_the_measured_ratio_against_k0_with_an_interval():
    seconds, tokens = rates(5, 0.2)  # k=5: 1.2x of k=0
    controller = ScheduleController(PRIOR, K_SET)
    Engine(seconds, tokens, noise=0.05, seed=3).run(controller, 32, 4000)
    ratio, low, high, pairs = controller.gain(bucket(32), 5)
    assert pairs >= 3 and low <= ratio <= high
    assert 1.15 < ratio < 1.25 and low < 1.2 < high


def test_it_moves_to_k0_within_a_bounded_number_of_steps_when_traffic_changes():
    controller = ScheduleController(PRIOR, K_SET)
    engine = Engine(*rates(5, 0.3), noise=0.1, seed=5)
    engine.run(controller, 32, 1500)
    assert controller.table()[bucket(32)] == 5
    engine.seconds, engine.tokens = rates(0, 0.3)
    engine.run(controller, 32, 3000)
    assert controller.table()[bucket(32)] == 0


def test_unsettled_and_prefill_steps_are_not_measured():
    controller = ScheduleController(PRIOR, K_SET, ControllerParams(block_steps=2))
    assert controller.observe(Step(32, 0, 0.1, 32, 0)) is None  # first: nothing before it
    assert controller.observe(Step(32, 0, 0.1, 32, 0, clean=False)) is None
    assert controller.observe(Step(32, 0, 0.1, 32, 0)) is None  # after a prefill step
    assert controller.buckets == {}
    controller.observe(Step(32, 0, 0.1, 32, 0))
    assert controller.buckets[bucket(32)].block.steps == 1


def test_a_new_bucket_starts_at_the_tables_k_for_the_batch_it_is_first_seen_at():
    """Bucket 4-7 straddles the table's break point (k=5 up to 4, k=2 from 5): first seen at
    batch 4 it starts at 5, the k the engine runs there, and writes nothing (it used to take the
    lower k=2, so the controller ran batch 4 below the fixed table: in seven c=4 runs mt_bench's
    4-7 never left k=2, 0.96-1.00 of fixed k=5); first seen at 6, at 2. A lookup that holds
    another k there (an arm of the run before) is written."""
    for batch, prior in ((4, 5), (6, 2), (7, 2), (5, 2)):
        controller = ScheduleController(PRIOR, K_SET)
        controller.observe(Step(batch, prior, 0.1, 2 * batch, prior * batch))
        assert controller.observe(Step(batch, prior, 0.1, 2 * batch, prior * batch)) is None
        state = controller.buckets[bucket(4)]
        assert state.prior == state.incumbent == controller.table()[bucket(4)] == prior
        controller.observe(Step(12, 0, 0.1, 12, 0))  # another bucket: the first keeps its k
        controller.observe(Step(batch + 1 if batch < 7 else 4, prior, 0.1, 8, 20))
        assert controller.table()[bucket(4)] == prior
    controller = ScheduleController(PRIOR, K_SET)
    controller.observe(Step(4, 0, 0.1, 4, 0))
    assert controller.observe(Step(4, 0, 0.1, 4, 0)) == (bucket(4), 5)


@STATISTICAL
@given(seed=st.integers(0, 10**6), batch=st.sampled_from([1, 4, 16, 32]))
def test_switchback_a_a_reads_one(seed, batch):
    controller = ScheduleController(PRIOR, K_SET)
    switchback = Switchback(controller, ("k0", "k0"))
    Engine(*rates(0, 0.2), noise=0.10, seed=seed).run(switchback, batch, 1200)
    report = switchback.report()["buckets"]
    cell = next(iter(report.values()))
    assert cell["pairs"] >= 90
    # A 90% interval misses now and then: the median within 1.5% of 1, the interval narrow.
    assert abs(cell["ratio"] - 1.0) < 0.015 and cell["high"] - cell["low"] < 0.03


def test_switchback_measures_k_against_k0_and_the_controller_arm():
    controller = ScheduleController(PRIOR, K_SET)
    switchback = Switchback(controller, ("k0", "k5"))
    Engine(*rates(5, 0.2), noise=0.10, seed=2).run(switchback, 32, 1200)
    cell = switchback.report()["buckets"]["32-63"]
    assert abs(cell["ratio"] - 1.2) < 0.03 and cell["low"] < cell["ratio"] < cell["high"]
    controller = ScheduleController(PRIOR, K_SET)
    switchback = Switchback(controller, ("k0", "controller"))
    Engine(*rates(5, 0.2), noise=0.10, seed=2).run(switchback, 32, 3000)
    cell = switchback.report()["buckets"]["32-63"]
    assert controller.table()[bucket(32)] == 5
    assert cell["ratio"] > 1.12


def test_switchback_arms_are_checked():
    assert parse_arms("k0, controller", K_SET) == ("k0", "controller")
    for bad in ("k0", "k0,k3", "k0,fast", "k0,k5,static"):
        with pytest.raises(ValueError):
            parse_arms(bad, K_SET)


def test_a_bucket_explores_only_k_whose_graph_was_captured():
    """MRV2 captures decode graphs up to `max_cudagraph_capture_size` query tokens (512 by
    default): at batch 64-127 a k=5 step (768 tokens at 127) would run eagerly, so the
    controller never explores it there; at batch 32-63 it does."""
    prior = [0] + [2] * 1024
    controller = ScheduleController(prior, (0, 2, 5), max_graph_tokens=512)
    assert set(controller.state(7).arms) == {0, 2}  # bucket 64-127
    assert set(controller.state(6).arms) == {0, 2, 5}  # bucket 32-63
    assert set(ScheduleController(prior, (0, 2, 5)).state(7).arms) == {0, 2, 5}

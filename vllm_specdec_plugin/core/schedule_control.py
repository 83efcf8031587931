"""The online schedule controller: which k each batch-size bucket drafts, learned from its steps.

Pure Python, no vLLM, no I/O; `engine/changes/core_sched_scheduler.py` feeds it one sample per
decode step and writes what it answers into vLLM's `Scheduler.dynamic_sd_lookup`.

Why inside the engine: adjacent decode steps of one engine share the host's state (clock speed,
cache, neighbours), so blocks of steps at one k interleaved with blocks at another, at the same
batch size, are a paired comparison at millisecond grain; two engines or two bursts of one
engine differ by 5-10% on a shared host. And the engine that measures is the user's own, on
their hardware and traffic, so the answer is theirs rather than a table from someone else's.

How: per batch-size bucket (1, 2-3, 4-7, ...: `core/step_cost.bucket`) the lookup holds one k
for a block of `block_steps` measured steps. Most blocks run the incumbent k (the fixed table's
value is the prior); now and then one block runs another k of the schedule's own k set (only
values the configured schedule names: on CUDA those are the k values vLLM captured graphs for),
sandwiched between incumbent blocks. Each such exploration block's output tokens per second,
divided by the mean of its two neighbouring incumbent blocks', is one paired ratio; per arm the
controller keeps a decayed mean of log ratios against the incumbent. An arm whose mean beats
the incumbent by `margin` over at least `min_pairs` pairs becomes the incumbent (hysteresis: the
old incumbent must then win by the margin to come back). An arm found clearly worse is explored
half as often each time (`explore_every` doubling up to `explore_every_max`), so the cost of
looking stays bounded where drafting loses, and a change of traffic is still seen.

A step is measured only when it is settled: decode only (no prefill chunk in it) and scheduled
at the same k as the step before it, since a step verifies the drafts proposed at the end of the
previous step (a block's first step verifies the previous block's k). Its time is the engine's
own, from `schedule()` to the end of `update_from_output()`: idle gaps between steps never
count.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from vllm_specdec_plugin.core.step_cost import StepCostTable, bucket_bounds

LOG_EPS = 1e-12
# Steps of the engine (any bucket) after which a bucket's block in progress is stale.
STALE_STEPS = 64
HISTORY_MAX = 64


class Step(NamedTuple):
    """One engine step, as the scheduler saw it (a tuple: one is made per step, cheaply).

    `batch`: requests scheduled (the lookup's index); `k`: the k the lookup gave the step
    (`num_spec_tokens_to_schedule`); `seconds`: from `schedule()` to the end of
    `update_from_output()`; `tokens`: output tokens the step produced (one per request plus the
    accepted drafts); `drafted`: draft tokens it verified; `clean`: decode only, no prefill
    chunk in it."""

    batch: int
    k: int
    seconds: float
    tokens: int
    drafted: int
    clean: bool = True


@dataclass(frozen=True)
class ControllerParams:
    """The controller's tunables."""

    block_steps: int = 6
    """Measured (settled) decode steps per block; the feasibility run paired blocks of 6 steps
    to about ±0.5% at batch 32 in 34 s on this project's 2-core host."""
    margin: float = 0.02
    """A challenger replaces the incumbent only when its tokens/s beats the incumbent's by this
    share (log scale); also the line below which an explored arm counts as clearly worse."""
    min_pairs: int = 3
    """Paired blocks an arm needs before it can replace the incumbent."""
    decay: float = 0.8
    """Weight of an arm's older paired ratios per new one (memory of ~5 pairs: recent traffic
    decides)."""
    explore_every: int = 2
    """Incumbent blocks between two exploration blocks at first (per bucket; the arms take
    turns), so a new bucket learns within tens of steps."""
    explore_every_max: int = 96
    """The most incumbent blocks between explorations of one clearly worse arm: at 6 steps a
    block, about 1 step in 100 spent on each losing arm (an arm that costs 40% then costs 0.4%
    of the bucket's throughput), and a change of traffic is noticed within ~600 steps of the
    bucket (seconds at small batch sizes, tens of seconds at large ones)."""


CONTROLLER_DEFAULTS = ControllerParams()


@dataclass
class ArmEstimate:
    """What the controller knows of one k in one bucket, against the bucket's incumbent."""

    log_gain: float = 0.0
    """Decayed mean of log(tokens/s of this k / tokens/s of the incumbent), from paired blocks."""
    log_sq: float = 0.0
    """Decayed mean of the squared log ratio (for the interval)."""
    weight: float = 0.0
    """Decayed count of the pairs behind the two means."""
    pairs: int = 0
    """Paired blocks seen (not decayed)."""
    gap: int = 0
    """Incumbent blocks between this arm's explorations, now."""
    wait: int = 0
    """Incumbent blocks left before this arm is explored again."""

    def add(self, log_ratio: float, decay: float) -> None:
        self.weight = self.weight * decay + 1.0
        share = 1.0 / self.weight
        self.log_gain += share * (log_ratio - self.log_gain)
        self.log_sq += share * (log_ratio * log_ratio - self.log_sq)
        self.pairs += 1

    def half_width(self) -> float:
        """90% half-width of `log_gain` (normal; inf before two pairs)."""
        if self.pairs < 2 or self.weight <= 1.0:
            return math.inf
        var = max(self.log_sq - self.log_gain * self.log_gain, 0.0)
        return 1.645 * math.sqrt(var / self.weight)


class _Block:
    """The block of steps in progress in one bucket: its k, and sums over its settled steps of
    tokens, seconds, requests (for its mean batch size) and drafted tokens. Slots: it is
    updated on every step."""

    __slots__ = ("arm", "steps", "tokens", "seconds", "rows", "drafted")

    def __init__(self, arm: int) -> None:
        self.arm = arm
        self.steps = self.rows = self.drafted = 0
        self.tokens = self.seconds = 0.0


@dataclass
class BucketState:
    """One batch-size bucket: its incumbent k, its arms and the block running now."""

    key: int
    prior: int
    incumbent: int
    arms: dict[int, ArmEstimate]
    block: _Block
    last_incumbent_rate: float | None = None
    pending: tuple[int, float, float] | None = None
    """An exploration block waiting for the incumbent block after it: (k, its rate, the rate of
    the incumbent block before it)."""
    last_seen: int = 0
    switches: int = 0
    steps: int = 0
    explore_steps: int = 0
    turn: list[int] = field(default_factory=list)
    history: list[tuple[int, int]] = field(default_factory=list)
    """(the bucket's measured steps at the switch, the new incumbent), the first
    `HISTORY_MAX` switches."""


class ScheduleController:
    """Per-bucket k from paired blocks of the engine's own steps; see the module docstring."""

    def __init__(self, prior: Sequence[int], k_set: Sequence[int],
                 params: ControllerParams = CONTROLLER_DEFAULTS) -> None:
        """`prior`: vLLM's lookup as built from the configured schedule (index = batch size);
        `k_set`: the k values the schedule names (0 included when it names 0)."""
        self.params = params
        self.prior = list(prior)
        self.k_set = tuple(sorted({int(k) for k in k_set}))
        if not self.k_set:
            raise ValueError("the schedule names no k")
        self.buckets: dict[int, BucketState] = {}
        self.costs = StepCostTable()
        self.step_index = 0
        self._previous_k = -1

    def prior_k(self, key: int) -> int:
        """The fixed table's k for bucket `key`: its value at the bucket's largest batch size
        the lookup covers (the lower of a bucket's two table values, where it straddles a
        break point)."""
        high = bucket_bounds(key)[1]
        index = min(high, len(self.prior) - 1)
        k = self.prior[index] if index >= 1 else self.k_set[-1]
        return k if k in self.k_set else min(self.k_set, key=lambda v: (abs(v - k), v))

    def state(self, key: int) -> BucketState:
        found = self.buckets.get(key)
        if found is None:
            k = self.prior_k(key)
            arms = {v: ArmEstimate(gap=self.params.explore_every, wait=self.params.explore_every)
                    for v in self.k_set}
            found = self.buckets[key] = BucketState(key, k, k, arms, _Block(k),
                                                    turn=[v for v in self.k_set if v != k])
        return found

    def k_for(self, key: int) -> int:
        """The k the lookup should hold for bucket `key` now."""
        return self.state(key).block.arm

    def interrupt(self) -> None:
        """A step that is not the controller's (a switchback arm's): the next one of its own
        is not settled."""
        self._previous_k = -1
        self.step_index += 1

    def observe(self, step: Step) -> tuple[int, int] | None:
        """One decode step. Returns (bucket, k) when the bucket's lookup must change, else
        None. Only a settled step (clean, at the same k as the step before, at the block's k)
        is measured. Runs on every engine step: kept to a few attribute reads and additions."""
        batch, k, seconds, tokens, drafted, clean = step
        settled = clean and k == self._previous_k
        self._previous_k = k if clean else -1
        self.step_index += 1
        if not settled or seconds <= 0.0 or batch < 1:
            return None
        state = self.buckets.get(batch.bit_length()) or self.state(batch.bit_length())
        if self.step_index - state.last_seen > STALE_STEPS:
            # The batch was elsewhere for a while: the host may have changed meanwhile, so the
            # block in progress and an unpaired exploration start over.
            state.block = _Block(state.block.arm)
            state.pending = None
            state.last_incumbent_rate = None
        state.last_seen = self.step_index
        block = state.block
        if k != block.arm:
            # The lookup does not hold the block's k (a new bucket still on the table's value
            # for this batch size): write it.
            return (state.key, block.arm)
        block.steps += 1
        block.tokens += tokens
        block.seconds += seconds
        block.rows += batch
        block.drafted += drafted
        if block.steps < self.params.block_steps:
            return None
        return self._close_block(state)

    def _close_block(self, state: BucketState) -> tuple[int, int] | None:
        block = state.block
        rate = block.tokens / block.seconds
        state.steps += block.steps
        if block.arm != state.incumbent:
            state.explore_steps += block.steps
        # The shared cost model learns from the block's mean step (once a block, not a step).
        n = block.steps
        self.costs.observe(round(block.rows / n), round(block.drafted / n), block.seconds / n)
        if block.arm == state.incumbent:
            if state.pending is not None:
                arm, arm_rate, before = state.pending
                self._paired(state, arm, math.log(max(arm_rate, LOG_EPS) * 2.0
                                                  / max(before + rate, LOG_EPS)))
                state.pending = None
            state.last_incumbent_rate = rate
            for estimate in state.arms.values():
                estimate.wait -= 1
        elif state.last_incumbent_rate is not None:
            state.pending = (block.arm, rate, state.last_incumbent_rate)
        arm = self._next_arm(state)
        state.block = _Block(arm)
        return (state.key, arm) if arm != block.arm else None

    def _paired(self, state: BucketState, arm: int, log_ratio: float) -> None:
        p = self.params
        estimate = state.arms[arm]
        estimate.add(log_ratio, p.decay)
        if estimate.log_gain < -p.margin:
            # Clearly worse: look half as often each time, and once two pairs agree, as rarely
            # as the loss is deep (a k that costs 30% is not worth a look for a long while).
            depth = 2 ** min(int(-estimate.log_gain / p.margin), 16) if estimate.pairs >= 2 else 1
            estimate.gap = min(max(estimate.gap * 2, p.explore_every * depth),
                               p.explore_every_max)
        else:
            estimate.gap = p.explore_every
        estimate.wait = estimate.gap
        if estimate.pairs >= p.min_pairs and estimate.log_gain > p.margin:
            self._switch(state, arm)

    def _switch(self, state: BucketState, arm: int) -> None:
        """`arm` becomes the incumbent; every estimate is re-based against it."""
        shift = state.arms[arm].log_gain
        old = state.arms[state.incumbent]
        old.log_gain, old.log_sq = 0.0, 0.0
        old.weight, old.pairs = state.arms[arm].weight, state.arms[arm].pairs
        for estimate in state.arms.values():
            estimate.log_sq += shift * shift - 2.0 * shift * estimate.log_gain
            estimate.log_gain -= shift
            estimate.gap = estimate.wait = self.params.explore_every
        new = state.arms[arm]
        new.log_gain = new.log_sq = 0.0
        state.incumbent = arm
        state.last_incumbent_rate = None
        state.switches += 1
        if len(state.history) < HISTORY_MAX:
            state.history.append((state.steps, arm))
        state.turn = [v for v in self.k_set if v != arm]

    def _next_arm(self, state: BucketState) -> int:
        """Explore right after an incumbent block only (so an exploration block has incumbent
        blocks on both sides), and one arm at a time, taking turns."""
        if state.block.arm != state.incumbent or state.pending is not None:
            return state.incumbent
        if state.last_incumbent_rate is None:
            return state.incumbent
        for _ in range(len(state.turn)):
            arm = state.turn.pop(0)
            state.turn.append(arm)
            if state.arms[arm].wait <= 0:
                return arm
        return state.incumbent

    def gain(self, key: int, k: int) -> tuple[float, float, float, int] | None:
        """(ratio, low, high, pairs): k's measured tokens/s against k=0 in bucket `key`, with
        a 90% interval; None before both were paired (or without 0 in the k set)."""
        state = self.buckets.get(key)
        if state is None or 0 not in state.arms or k not in state.arms:
            return None
        arm, zero = state.arms[k], state.arms[0]
        if k == 0:
            return (1.0, 1.0, 1.0, zero.pairs)
        have = [e for v, e in ((k, arm), (0, zero)) if v != state.incumbent]
        if any(e.pairs == 0 for e in have):
            return None
        mid = arm.log_gain - zero.log_gain
        half = math.sqrt(sum(e.half_width() ** 2 for e in have))
        pairs = min(e.pairs for e in have)
        if math.isinf(half):
            return (math.exp(mid), 0.0, math.inf, pairs)
        return (math.exp(mid), math.exp(mid - half), math.exp(mid + half), pairs)

    def table(self) -> dict[int, int]:
        """bucket -> the incumbent k (what the lookup holds outside exploration blocks)."""
        return {key: state.incumbent for key, state in sorted(self.buckets.items())}

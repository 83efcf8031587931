"""The online schedule controller: which k each batch-size bucket drafts, learned from its steps.

Pure Python, no I/O; `engine/changes/core_sched_scheduler.py` feeds it one sample per decode step
and writes what it answers into vLLM's `Scheduler.dynamic_sd_lookup`. Blocks at one k interleaved
with blocks at another in one engine are a paired comparison at millisecond grain.

Per batch-size bucket (1, 2-3, 4-7, ...) the lookup holds one k for a block of steps: mostly the
incumbent (the fixed table's value is the prior), now and then another k of the schedule's own
set between two incumbent blocks. Its rate less the pooled rate of both neighbours, over the
incumbent's rate, is one paired gain (`core/pair_price.py` `pair_gain`: linear in the yields,
so unbiased where a log ratio leans against the noisier block; `core/arm_stats.py` keeps them
per arm). A k replaces the incumbent only when the one-sided bound of its mean gain clears
`margin` (`ControllerParams.alpha`: the error rate). Each other k is explored as often as it
may win and no more often than its loss allows (`core/explore_pace.py`). Every arm's evidence
restarts at a switch, one arm's when its CUSUM says the traffic changed (k=0's also when the
incumbent's yield moved its way). A switch also moves the buckets with no decision of their
own, in batch order (`_carried`).

A block's rate: yield per row (tokens / batch, summed over steps) over time in steps at the
bucket's smallest batch (seconds over `BatchShape`, a plain step's time at that batch against
one at the smallest, fitted online from every arm's steps, the drafted tokens a regressor).
Blocks are of equal time (`block_steps` incumbent steps' worth), so a slow-stepping k is not
given more of the text than the k it is compared with. A stalled step is left out. Two
drafting k, with vLLM's accepted counts: both priced on one text, the smaller k's yield
counted from the larger k's accepted drafts (`pair_price.counted_times`). Else from
`text_share_from_batch` up a drafting block is priced at the text's matched-token share.

A step is measured only when settled: decode only, at the same k as the step before (a step
verifies the previous step's drafts); its time is one whole engine cycle, idle gaps left out
(`ControlledScheduler.observe` in `engine/schedule_runtime.py`). vLLM has scheduled the next step
(two, asynchronously) before a step reaches the controller, so a block's next k is written
`lag` (measured) steps before it is full; the first step at the new k ends it. A bucket not
seen for `STALE_STEPS` engine steps ends a visit, back to its incumbent (`_end_visit`). Where
visits end (closed batches draining) blocks shrink to fit a pair in a typical visit
(`ControllerParams.visit_share`), an exploration starts where the visit leaves room for it, and
its pair may end in the next visit.
Measured: docs/schedule-controller.md.
"""

from __future__ import annotations

import math
from collections.abc import Container, Sequence

from vllm_specdec_plugin.core.arm_stats import ArmEstimate, relative_gain
from vllm_specdec_plugin.core.batch_shape import BatchShape
from vllm_specdec_plugin.core.explore_pace import early_look, pace, restart_after_switch
from vllm_specdec_plugin.core.pair_price import Measure, counted_times, draft_time, pair_gain
from vllm_specdec_plugin.core.schedule_params import CONTROLLER_DEFAULTS, ControllerParams
from vllm_specdec_plugin.core.schedule_state import (
    HISTORY_MAX,
    MIN_BLOCK_STEPS,
    Block,
    BucketState,
    Step,
)
from vllm_specdec_plugin.core.step_cost import StepCostTable, bucket_bounds, captured_ks

__all__ = ["BucketState", "ControllerParams", "ScheduleController", "Step"]

STALE_STEPS = 64  # engine steps (any bucket) after which a bucket is stale
MAX_TAIL = 8  # a bucket's steps at the old k after a write ahead, past which it is written again
RISE = 1.02  # per step, the most a step-time envelope rises: a lasting slowdown in ~50 steps


class ScheduleController:
    """Per-bucket k from paired blocks of the engine's own steps; see the module docstring."""

    def __init__(self, prior: Sequence[int], k_set: Sequence[int],
                 params: ControllerParams = CONTROLLER_DEFAULTS,
                 max_graph_tokens: int | None = None) -> None:
        """`prior`: vLLM's lookup as built from the configured schedule (index = batch size);
        `k_set`: the k values the schedule names (0 included when it names 0);
        `max_graph_tokens`: the largest captured decode graph (`step_cost.captured_ks`)."""
        self.params, self.max_graph_tokens = params, max_graph_tokens
        self.prior = list(prior)
        self.k_set = tuple(sorted({int(k) for k in k_set}))
        if not self.k_set:
            raise ValueError("the schedule names no k")
        self.buckets: dict[int, BucketState] = {}
        self.costs = StepCostTable()
        self.step_index, self._previous_k = 0, -1
        self.lag = 1.0
        """Steps still run at the old k after a lookup write (decayed mean): 1 in the
        synchronous engine (from the decision thread), 2 in the asynchronous one."""

    def prior_k(self, key: int, batch: int | None = None) -> int:
        """The fixed table's k for bucket `key` at `batch`, the batch size it is first seen at
        (the k the engine runs then: 4-7 straddles the CPU table's k=5 up to 4, and its lower
        value started batch 4 below the table); else at its largest batch size the lookup has."""
        high = bucket_bounds(key)[1]
        index = min(high if batch is None else max(batch, 1), len(self.prior) - 1)
        k = self.prior[index] if index >= 1 else self.k_set[-1]
        return k if k in self.k_set else min(self.k_set, key=lambda v: (abs(v - k), v))

    def state(self, key: int, batch: int | None = None) -> BucketState:
        found = self.buckets.get(key)
        if found is None:
            prior, (low, high) = self.prior_k(key, batch), bucket_bounds(key)
            every = self.params.explore_every
            ks = captured_ks(self.k_set, high, self.max_graph_tokens, prior)
            arms = {v: ArmEstimate(gap=every, wait=every) for v in ks}
            k = self._carried(key, prior, arms)
            found = self.buckets[key] = BucketState(
                key, prior, k, arms, Block(k, math.inf, 0.0, 0), BatchShape(low),
                turn=[v for v in ks if v != k])
            found.block = self._new_block(found, k)
        return found

    def _new_block(self, state: BucketState, arm: int) -> Block:
        steps = state.block_steps(self.params.block_steps, round(self.lag),
                                  self.params.visit_share)
        target = steps * state.step_time if state.step_time > 0.0 else math.inf  # else by steps
        return Block(arm, state.arms[arm].low, target, 4 * steps if state.step_time > 0.0
                     else steps, state.arms if self.params.counted_pairs else None)

    def k_for(self, key: int) -> int:
        """The k the lookup should hold for bucket `key` now (the next block's, once written
        ahead)."""
        block = self.state(key).block
        return block.arm if block.next < 0 else block.next

    def interrupt(self) -> None:
        """A step that is not the controller's (a switchback arm's): the next one of its own
        is not settled."""
        self._previous_k = -1
        self.step_index += 1

    def observe(self, step: Step) -> tuple[int, int] | None:
        """One decode step. Returns (bucket, k) when the bucket's lookup must change, else
        None. Only a settled step (clean, at the same k as the step before, at the block's k)
        is measured. Runs on every engine step: O(1), a few attribute reads and additions."""
        batch, k, seconds, tokens, drafted, clean, drafts, accepted = step
        settled = clean and k == self._previous_k
        self._previous_k = k if clean else -1
        self.step_index += 1
        if batch < 1:
            return None
        state = self.buckets.get(batch.bit_length())
        if state is None:
            if not settled:
                return None
            state = self.state(batch.bit_length(), batch)
        if self.step_index - state.last_seen > STALE_STEPS:
            self._end_visit(state)
        state.last_seen = self.step_index
        state.visit += 1
        block = state.block
        if k != block.arm:
            if k == block.next:  # the k written ahead has landed: the block ended a step ago
                self.lag += 0.2 * (min(block.tail, MAX_TAIL) - self.lag)
                return self._close_block(state)
            # The lookup does not hold the block's k (a new bucket still on the table's value
            # for this batch size, a stale one on its exploration k): write it.
            return (state.key, block.arm if block.next < 0 else block.next)
        ahead = block.next >= 0 and block.next != block.arm
        if ahead:  # a step vLLM scheduled before the next k was written: still this block's
            block.tail += 1
        if not settled or seconds <= 0.0:
            return None
        time = seconds / state.shape.factor(batch)
        low = block.low
        if time < low:
            block.low = time
        else:
            block.low = low * RISE
            if time > self.params.outlier * max(low, state.slowest_low):
                # A stall says nothing about k: the step is left out, yield and time alike.
                block.stalled += 1
                return None
        block.add(batch, time, seconds, tokens, drafted)
        if k:
            block.count(batch, drafts, accepted)
        if ahead:  # a write that did not land (the lookup rewritten meanwhile): once more
            return None if block.tail <= MAX_TAIL else (state.key, block.next)
        full = block.time >= block.target or block.steps >= block.cap
        if block.next < 0:
            lag = round(self.lag)  # full once the steps already scheduled have run?
            if not full and block.time * (1 + lag / block.steps) < block.target \
                    and block.steps + lag < block.cap:
                return None
            block.next = self._choose_next(state)
            if block.next != block.arm:  # written now, it lands as the block fills
                return (state.key, block.next)
        return self._close_block(state) if full else None

    def _end_visit(self, state: BucketState) -> None:
        """The batch was elsewhere a while: back to the incumbent. A block of `MIN_BLOCK_STEPS`
        or more that a pair needs closes as it stands (an exploration after an incumbent block,
        paired in the next visit; the incumbent block after one); any other is dropped."""
        block = state.block
        if block.steps >= MIN_BLOCK_STEPS and (
                state.pending is not None if block.arm == state.incumbent
                else state.pending is None and state.last_incumbent is not None):
            block.next = state.incumbent
            self._close_block(state)
        state.end_visit(self.params.explore_every, self.step_index - state.last_seen)
        state.block = self._new_block(state, state.incumbent)

    def _close_block(self, state: BucketState) -> tuple[int, int] | None:
        """The block ends: its measure to its arm, a pair where it completes one, and the next
        block begins at the k chosen ahead (the incumbent, where a pair just switched it).
        Returns the lookup write that needs (none where the chosen k is already running)."""
        block, n, old = state.block, state.block.steps, state.incumbent
        estimate, estimate.low = state.arms[block.arm], block.low
        state.slowest_low = max(a.low for a in state.arms.values() if a.low < math.inf)
        state.stalls += block.stalled
        state.steps += n
        # The shared cost model: its no-draft time from the block's mean step, its shape
        # within the bucket and its price of a drafted token from the fit of every step.
        self.costs.observe(round(block.rows / n), round(block.drafted / n), block.seconds / n)
        state.shape.add(block.shape_moments())
        low, high = bucket_bounds(state.key)
        if state.shape.fit is not None:
            self.costs.take_fit(low, state.shape.fit)
        estimate.count_block(block.yields, n, block.rows, block.time)
        batch, first = block.rows / n, self.params.text_share_from_batch
        priced = block.arm and first and low >= first  # else as it ran
        extra = self.costs.extra(min(max(round(batch), low), high)) if (
            priced or block.counted[0]) else None  # asked, it may refit
        price = draft_time(block.arm, batch, block.drafting / n, extra, state.shape.factor(batch))
        measure = Measure(block.yields, block.time, float(block.rows), n, block.drafting,
                          price if priced else 0.0,
                          block.counts(price if extra is not None else None))
        if block.arm == state.incumbent:
            time = block.time / n
            state.step_time = time if state.step_time <= 0.0 else (
                state.step_time + 0.2 * (time - state.step_time))
            if block.arm:
                self._watch_yield(state, block.yields / n, estimate.floor(block.arm, block.rows))
            if state.pending is not None:
                explored = state.pending[0]
                self._paired(state, state.pending, measure)
                state.pending = None
                # `_choose_next` counted every wait down before the pair set this arm's (and a
                # switch every arm's): theirs once more, as though counted after.
                for key, arm in state.arms.items():
                    if key == explored or state.incumbent != old:
                        arm.wait -= 1
            state.last_incumbent = measure if block.arm == state.incumbent else None
        else:
            state.explore_steps += n
            if state.last_incumbent is not None:
                state.pending = (block.arm, measure, state.last_incumbent)
        running = block.next if block.next >= 0 else block.arm
        k = state.incumbent if state.incumbent != old or block.next < 0 else block.next
        state.block = self._new_block(state, k)
        return (state.key, k) if k != running else None

    def _watch_yield(self, state: BucketState, y: float, floor: float) -> None:
        """An incumbent block's yield to the bucket's `YieldLevel`, and from it k=0's level
        (`core/explore_pace.early_look`: its look brought forward where it may now win)."""
        level, estimate = state.level.add(y, floor), state.arms.get(0)
        if level is not None and estimate is not None and state.incumbent != 0:
            state.zero_armed, looked = early_look(estimate, level, state.zero_armed, self.params)
            state.early_looks += looked

    def _paired(self, state: BucketState, pending: tuple[int, Measure, Measure],
                after: Measure) -> None:
        """One pair: the exploration block's gain over its two neighbours (`pair_gain`)."""
        arm, explored, before = pending
        times = counted_times(arm, state.incumbent, explored, before, after)
        state.counted_pairs += times is not None
        gain, floor = state.counted_gain(arm, times, self.params.decay) if times else (
            pair_gain(explored, before, after, state.arms[state.incumbent].rate()),
            state.arms[arm].floor(arm, explored.rows) + state.arms[state.incumbent].floor(
                state.incumbent, before.rows + after.rows))
        p, estimate = self.params, state.arms[arm]
        verdict = estimate.judge(gain, floor, p.decay, p.alpha, p.margin, p.min_pairs,
                                 p.back_off, (before.yields + after.yields) / max(
                                     before.steps + after.steps, 1))
        if verdict > 0:
            self._switch(state, arm)
            return
        estimate.gap = estimate.wait = pace(estimate, verdict, p)

    def _switch(self, state: BucketState, arm: int, decided: bool = True) -> None:
        """`arm` becomes the incumbent; every arm's evidence restarts from zero, its pace
        from what the evidence before said (`restart_after_switch`). A decision of the
        bucket's own (`decided`) is carried to its undecided neighbours."""
        old = state.incumbent
        restart_after_switch(state.arms, old, arm, self.params)
        state.incumbent = arm
        state.last_incumbent = state.pending = None
        state.step_time = 0.0
        state.level.restart()
        state.text_time.clear()
        state.zero_armed = False
        state.turn = [v for v in state.arms if v != arm]
        if not decided:
            state.block = self._new_block(state, arm)  # written at the bucket's next step
            return
        state.switches += 1
        state.decision = (old, arm)
        if len(state.history) < HISTORY_MAX:
            state.history.append((state.steps, arm))
        for other in self.buckets.values():
            if other.decision is None:
                k = self._carried(other.key, other.incumbent, other.arms)
                if k != other.incumbent:
                    self._switch(other, k, decided=False)

    def _carried(self, key: int, k: int, arms: Container[int]) -> int:
        """Bucket `key`'s k moved by the other buckets' last decisions, in the batch order of
        n-gram drafts (verifying costs more per token as the batch grows, acceptance does not):
        a k that beat a smaller one at a batch beats it at every smaller batch, one that beat a
        larger k at every larger batch. Only for a bucket with no decision of its own."""
        for other in self.buckets.values():
            if other.decision is None or other.key == key:
                continue
            old, new = other.decision
            if new in arms and ((new > old and key < other.key and k < new)
                                or (new < old and key > other.key and k > new)):
                k = new
        return k

    def _choose_next(self, state: BucketState) -> int:
        """The k of the block after this one, chosen as it fills. Explore right after an
        incumbent block only (so an exploration block has incumbent blocks on both sides),
        one arm at a time, taking turns; not the arm whose pair this block completes (its
        pace is the pair's, set at the block's end)."""
        if state.block.arm != state.incumbent:
            return state.incumbent
        for estimate in state.arms.values():
            estimate.wait -= 1
        lag, p = round(self.lag), self.params
        if not state.room_for_exploration(p.block_steps, lag, p.visit_share):
            return state.incumbent  # the visit would end before it is measured
        pending = state.pending[0] if state.pending is not None else None
        for _ in range(len(state.turn)):
            arm = state.turn.pop(0)
            state.turn.append(arm)
            if state.arms[arm].wait <= 0 and arm != pending:
                return arm
        return state.incumbent

    def gain(self, key: int, k: int) -> tuple[float, float, float, int] | None:
        """(ratio, low, high, pairs): k's measured tokens/s against k=0 in bucket `key`, with
        a 90% interval; None before both were paired (or without 0 in the k set)."""
        state = self.buckets.get(key)
        if state is None or 0 not in state.arms or k not in state.arms:
            return None
        return relative_gain(state.arms, state.incumbent, k)

    def table(self) -> dict[int, int]:
        """bucket -> the incumbent k (what the lookup holds outside exploration blocks)."""
        return {key: state.incumbent for key, state in sorted(self.buckets.items())}

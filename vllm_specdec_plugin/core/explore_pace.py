"""When the schedule controller explores each arm (`core/schedule_control.py`). Pure Python.

`pace`: incumbent blocks until an arm's next exploration, from its evidence (`core/arm_stats.py`).
By its chance to win, and never more often than what it is fairly sure to lose allows
(`ControllerParams.explore_cost`): a look at a k that loses L costs L of a block, so an arm at
-70% (k=0 on repetitive text at batch 1) is looked at once in about 280 blocks, not 97, and one
within reach at the chance pace (docs/schedule-controller.md, "Exploration priced by its loss").

`YieldLevel`: rare looks see a change of traffic late, so the incumbent's own blocks are read
for one. A drafting incumbent's yield per row moves with the text; k=0 yields one token a row
whatever the text, so its level at the incumbent's recent yield is known from its pairs
without a look (`zero_level`), and where that level crosses to where k=0 may win while its
next look is far off, its evidence restarts and it is looked at at once
(`ScheduleController._watch_yield`). A drafting arm's level under a new yield would be a guess
(how often longer drafts match): it waits for its own pairs.
"""

from __future__ import annotations

import math
from statistics import NormalDist

from vllm_specdec_plugin.core.arm_stats import CUSUM_H, ArmEstimate
from vllm_specdec_plugin.core.schedule_params import ControllerParams

LEVEL_DECAY = 0.95
"""Per incumbent block, the weight of the older blocks in `YieldLevel`."""
LEVEL_WARM = 8.0
"""The weight of blocks `YieldLevel` reads before it answers."""
LEVEL_Z = 2.0
"""Standard errors above `YieldLevel`'s mean at which it reads the level (one-sided 97.7%)."""


def pace(estimate: ArmEstimate, verdict: int, p: ControllerParams) -> int:
    """Incumbent blocks until the arm's next exploration, set after each of its pairs
    (`verdict`: `ArmEstimate.judge`'s). Its CUSUM half way up on pairs that may win (the
    traffic may be changing its way): soon. Clearly worse: half as often each time, as rarely
    as the loss is deep (`explore_every_max`). Otherwise by its chance to win
    (`explore_every_unsure`), the gap at most doubling or halving per pair. And never more
    often than its loss allows (`explore_cost`), a gap reached by doubling unless clearly worse
    (a few noisy pairs do not send an arm to rare looks at once). After a change that the
    pairs since say it loses by (`hopeful`), never more often than before it
    (`ArmEstimate.held`). Pacing moves no decision's error rate, only how soon a decision
    comes and what looking costs."""
    if estimate.up > CUSUM_H / 2 and estimate.rising() > -p.margin:
        return p.explore_every
    loss = -estimate.level(p.min_pairs, p.pace_level)
    costly = loss_gap(loss, p)
    # After a change was seen: soon while the change's level and the pairs since say it may
    # win; once they say it loses (a false alarm), never more often than before the change,
    # from the next look on (the pairs behind the gain still hold the wild one that showed
    # the change: by them alone the gap came down again by halves).
    may_win = hopeful(estimate, p)
    held = 0 if may_win else estimate.held
    if verdict < 0:
        depth = 1 << max(0, min(int(-estimate.gain / p.margin), 16))
        return max(min(max(estimate.gap * 2, p.explore_every * depth), p.explore_every_max),
                   costly, held)
    if estimate.pairs < p.min_pairs:
        gap = p.explore_every if may_win else estimate.gap
    else:
        chance = max(estimate.win_chance(p.margin), 1e-6)
        gap = min(max(round(p.explore_every / chance), p.explore_every), p.explore_every_unsure)
        # At most twice or half the last gap: an arm on the edge of clearly worse does not
        # flip between its deep gap and a short one at each pair.
        gap = min(max(gap, estimate.gap // 2), max(estimate.gap * 2, p.explore_every))
    return max(gap, min(costly, estimate.gap * 2), held)


def loss_gap(loss: float, p: ControllerParams) -> int:
    """Incumbent blocks between two looks at an arm that loses a share `loss`, so that its
    looks cost at most `explore_cost` of the bucket's throughput (up to
    `explore_every_rarest`; at or below 0 where it may not lose)."""
    return min(round(loss / p.explore_cost), p.explore_every_rarest)


def restart_after_switch(arms: dict[int, ArmEstimate], old: int, new: int,
                         p: ControllerParams) -> None:
    """At a switch every arm's evidence restarts from zero: measured against the old
    incumbent, carried over, one noisy block would switch back, so no decision uses it. Its
    pace need not restart: where both an arm and the winner had `min_pairs` pairs (the old
    incumbent has the winner's), the arm's level against the new incumbent is (1 + its gain)
    / (1 + the winner's) - 1, at `pace_level`'s bounds on the side that favours looking (its
    upper, the winner's lower; the old incumbent's gain is 0). An arm that level says loses
    by more than the margin starts at the gap its loss allows (`explore_cost`, as `pace`)
    and is paced by that level, as by a change's (`ArmEstimate.moved`, `held`), until its
    own `min_pairs` pairs rule (`ArmEstimate.judge`). Right after a switch at batch 4,
    restarted at the first pace, two losing arms took 45% of the first 150 steps
    (docs/schedule-controller.md, "Paced after a switch"). Every other arm, and every arm
    where the winner had too few pairs (a switch carried from another bucket), restarts at
    `explore_every`. Pacing only: no decision's error rate moves."""
    winner = arms[new]
    low = winner.bounds(p.pace_level)[0] if winner.pairs >= p.min_pairs else -math.inf
    spread = winner.prediction_sd()
    for k, arm in arms.items():
        high = 0.0 if k == old else arm.bounds(p.pace_level)[1] if (
            k != new and arm.pairs >= p.min_pairs) else math.inf
        arm.reset()
        arm.gap = arm.wait = p.explore_every
        level = (1.0 + high) / (1.0 + low) - 1.0 if low > -1.0 else math.inf
        if level < -p.margin:
            arm.moved, arm.spread, arm.carried = level, spread, True
            arm.gap = arm.wait = arm.held = max(loss_gap(-level, p), p.explore_every)


def hopeful(estimate: ArmEstimate, p: ControllerParams) -> bool:
    """Whether an arm a change restarted may win: by the pairs since, where there are any
    (their mean `pace_level`'s quantile of their standard error above -margin, one pair's
    spread that of the arm's pairs before the change), else by the change's level
    (`ArmEstimate.moved`, above -margin). The pair that showed the change is in `moved`, not
    in the pairs since: counted there, one wild pair kept a false alarm hopeful for three
    more looks. True where no change was seen (a new arm learns at the first pace)."""
    if estimate.moved is None:
        return True
    total, count = estimate.since
    if not count:
        return estimate.moved > -p.margin
    z = NormalDist().inv_cdf(p.pace_level)
    return total / count + z * estimate.spread / math.sqrt(count) > -p.margin


def zero_level(gain: float, reference: float, level: float) -> float | None:
    """k=0's gain against a drafting incumbent whose yield per row step is now `level`, from
    its pairs' `gain`, measured where the incumbent yielded `reference`: k=0 yields one token
    a row step whatever the text and neither side's step time moves with the text, so its
    gain scales by reference / level. Tokens, not seconds: the host's drift is not in it.
    None before a pair."""
    if reference <= 0.0 or level <= 0.0:
        return None
    return (1.0 + gain) * reference / level - 1.0


def early_look(zero: ArmEstimate, level: float, armed: bool, p: ControllerParams
               ) -> tuple[bool, bool]:
    """k=0's arm (`zero`) against a drafting incumbent whose recent yield is `level` (the
    upper bound `YieldLevel` reads). Where k=0's level there (`zero_level`) has come up from a
    loss to where it may win and its next look is far off (one due soon tells soon enough),
    its pairs (other traffic's) restart at that level and it is looked at next; once per rise.
    Returns (armed: read as a loss since the last early look, whether it looked early)."""
    level_now = zero_level(zero.gain, zero.reference, level)
    if level_now is None or level_now <= -p.margin:
        return level_now is not None, False
    if not armed or zero.wait <= p.explore_every_unsure:
        return armed, False
    zero.restart(level_now, zero.gap)
    zero.wait = min(zero.wait, p.explore_every)
    return False, True


class YieldLevel:
    """A drafting incumbent's mean yield per row step over its recent blocks: an exponentially
    weighted mean, `LEVEL_DECAY` a block (about 40 blocks' worth, 240 steps at batch 1), and a
    one-sided upper bound on it at `LEVEL_Z` standard errors (its spread the larger of the
    blocks' and `block_var`'s floor, over the weights' effective number). Long enough that
    the passages and free text inside one kind of traffic average out (input-grounded text at
    batch 1 alternates the two every few blocks: a CUSUM on the blocks read each free-text
    spell as a change, and k=0 was looked at in 5-7% of the steps where it loses 55%); short
    enough to follow a change of traffic within a few hundred steps; the bound keeps a k=5
    that yields a little more than k=0 (open-ended text) from reading as k=0's level by its
    noise."""

    __slots__ = ("weight", "weight_sq", "mean", "square")

    def __init__(self) -> None:
        self.restart()

    def restart(self) -> None:
        """Forget the blocks (a new incumbent)."""
        self.weight = self.weight_sq = self.mean = self.square = 0.0

    def add(self, y: float, floor: float) -> float | None:
        """One incumbent block's mean yield per row step `y`, `floor` the least relative
        variance of such a block (`block_var`). The upper bound on the level, None while
        warming (`LEVEL_WARM`)."""
        self.weight = self.weight * LEVEL_DECAY + 1.0
        self.weight_sq = self.weight_sq * LEVEL_DECAY * LEVEL_DECAY + 1.0
        self.mean += (y - self.mean) / self.weight
        self.square += (y * y - self.square) / self.weight
        if self.weight < LEVEL_WARM:
            return None
        mean = self.mean
        var = max(self.square - mean * mean, floor * mean * mean)
        return mean + LEVEL_Z * math.sqrt(var * self.weight_sq) / self.weight

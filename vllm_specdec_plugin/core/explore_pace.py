"""When the schedule controller explores each arm (`core/schedule_control.py`). Pure Python.

`pace`: incumbent blocks until an arm's next exploration, from its evidence (`core/arm_stats.py`).
By its chance to win, and never more often than what it is fairly sure to lose allows
(`ControllerParams.explore_cost`): a look at a k that loses L costs L of a block, so an arm at
-70% (k=0 on repetitive text at batch 1) is looked at once in about 280 blocks, not 96, and one
within reach at the chance pace (docs/schedule-controller.md, "Exploration priced by its loss").

`YieldShift`: rare looks see a change of traffic late, so the incumbent's own blocks watch for
one. A drafting incumbent's yield per row moves with the text; k=0 yields one token a row
whatever the text, so when the incumbent's yield moves (a CUSUM on its blocks) k=0's level
under the new yield is known without a look (`zero_level`), and where it may now win its
evidence restarts and it is looked at at once (`ScheduleController._watch_yield`). A drafting
arm's level under the new yield would be a guess (how often longer drafts match): it waits for
its own pairs.
"""

from __future__ import annotations

import math

from vllm_specdec_plugin.core.arm_stats import CUSUM_CLIP, CUSUM_H, CUSUM_K, ArmEstimate
from vllm_specdec_plugin.core.schedule_params import ControllerParams

SHIFT_DECAY = 0.995
"""Per incumbent block, the weight of the older blocks in `YieldShift`'s mean and variance."""
SHIFT_WARM = 8
"""Incumbent blocks `YieldShift` reads before it watches (a mean and a spread to stand on)."""


def pace(estimate: ArmEstimate, verdict: int, p: ControllerParams) -> int:
    """Incumbent blocks until the arm's next exploration, set after each of its pairs
    (`verdict`: `ArmEstimate.judge`'s). Its CUSUM half way up on pairs that may win (the
    traffic may be changing its way): soon. Clearly worse: half as often each time, as rarely
    as the loss is deep (`explore_every_max`). Otherwise by its chance to win
    (`explore_every_unsure`), the gap at most doubling or halving per pair. And never more
    often than its loss allows (`explore_cost`), a gap reached by doubling unless clearly worse
    (a few noisy pairs do not send an arm to rare looks at once). Pacing moves no decision's
    error rate, only how soon a decision comes and what looking costs."""
    if estimate.up > CUSUM_H / 2 and estimate.rising() > -p.margin:
        return p.explore_every
    loss = -estimate.level(p.min_pairs, p.pace_level)
    costly = min(round(loss / p.explore_cost), p.explore_every_rarest)
    if verdict < 0:
        depth = 1 << max(0, min(int(-estimate.gain / p.margin), 16))
        return max(min(max(estimate.gap * 2, p.explore_every * depth), p.explore_every_max),
                   costly)
    if estimate.pairs < p.min_pairs:
        # After a change was seen: soon while the change's level and the pairs since say it
        # may win, else at the gap it had (one look, not `min_pairs`, undoes a false alarm).
        moved = estimate.moved
        hopeful = moved is None or (moved > -p.margin and (
            estimate.pairs == 0 or estimate.gain > -p.margin))
        gap = p.explore_every if hopeful else estimate.gap
    else:
        chance = max(estimate.win_chance(p.margin), 1e-6)
        gap = min(max(round(p.explore_every / chance), p.explore_every), p.explore_every_unsure)
        # At most twice or half the last gap: an arm on the edge of clearly worse does not
        # flip between its deep gap and a short one at each pair.
        gap = min(max(gap, estimate.gap // 2), max(estimate.gap * 2, p.explore_every))
    return max(gap, min(costly, estimate.gap * 2))


def zero_level(rate: float, step_time: float, after: float) -> float | None:
    """k=0's gain against a drafting incumbent whose mean yield per row step is now `after`:
    k=0 yields one token a row step whatever the text, so its rate (`ArmEstimate.rate`) over
    the incumbent's (`after` over its mean step time) is its level, no look needed. None
    before either rate was measured."""
    if rate <= 0.0 or step_time <= 0.0 or after <= 0.0:
        return None
    return rate * step_time / after - 1.0


class YieldShift:
    """A two-sided CUSUM on a drafting incumbent's blocks' mean yield per row step, against
    its decayed mean (`SHIFT_DECAY`), in standard deviations of a block (the larger of theirs
    and `block_var`'s floor): `add` answers (before, after) when the yield moved, after the
    mean of the blocks that showed it, and watches again from there. `CUSUM_K`, `CUSUM_H` and
    `CUSUM_CLIP` as for the arms' pairs: one wild block alone moves nothing."""

    __slots__ = ("weight", "mean", "square", "up", "down", "runs")

    def __init__(self) -> None:
        self.restart()

    def restart(self, level: float | None = None) -> None:
        """Forget the blocks (a new incumbent), or keep only `level` (a shift was seen)."""
        self.weight = 0.0 if level is None else 1.0
        self.mean = 0.0 if level is None else level
        self.square = 0.0
        self.up = self.down = 0.0
        self.runs = [0.0, 0.0, 0.0, 0.0]

    def add(self, y: float, floor: float) -> tuple[float, float] | None:
        """One incumbent block's mean yield per row step `y`; `floor` the least relative
        variance of such a block (`block_var`). (before, after) when the CUSUM passes
        `CUSUM_H`, else None."""
        if self.weight >= SHIFT_WARM:
            var = max(self.square / self.weight - self.mean * self.mean,
                      floor * self.mean * self.mean)
            off = y - self.mean
            z = off / math.sqrt(var) if var > 0.0 else (math.copysign(CUSUM_CLIP, off)
                                                        if off else 0.0)
            z = max(-CUSUM_CLIP, min(z, CUSUM_CLIP))
            self.up = max(0.0, self.up + z - CUSUM_K)
            self.down = max(0.0, self.down - z - CUSUM_K)
            runs = self.runs
            for side, cusum in ((0, self.up), (2, self.down)):
                runs[side], runs[side + 1] = (runs[side] + y, runs[side + 1] + 1) \
                    if cusum else (0.0, 0.0)
            if max(self.up, self.down) > CUSUM_H:
                side = 0 if self.up > self.down else 2
                before, after = self.mean, runs[side] / runs[side + 1]
                self.restart(after)
                self.square = after * after
                return before, after
        self.weight = self.weight * SHIFT_DECAY + 1.0
        self.mean += (y - self.mean) / self.weight
        self.square += (y * y - self.square) / self.weight
        return None

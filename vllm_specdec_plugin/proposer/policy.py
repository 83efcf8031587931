"""The adaptive proposer's decision: expected tokens and step costs -> draft length per row.

Pure Python and numpy, no vLLM: `proposer.py` feeds it what the engine shows the proposer.

The rule is goodput: draft the tokens that maximise expected tokens per second of the step,
`(rows + sum of the drafted tokens' values) / seconds(rows, drafted)`, where a token's value is
the chance it and every token before it in its row's draft are accepted (`acceptance.py`) and
`seconds` is the measured cycle time (`core/step_cost.py`, the proposer's own time included).
Tokens go in best first (a row's values fall with position, so a row's draft is always a
prefix); the best prefix is then kept only if it beats drafting nothing by the controller's
`margin` (`control.py`): the estimates are noisy and a draft that only breaks even on paper
loses in practice. Under load the step's rate approaches one token per verified slot, so only
drafts that are (almost) surely accepted stay; at batch 1 the fixed cost dominates and long
drafts pay even at modest acceptance. vLLM 0.33's DSpark on the V2 runner decides on the same
goodput argument.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from itertools import chain

import numpy as np


def outcome(candidate: Sequence[int], actual: Sequence[int]) -> tuple[int, int]:
    """(accepted positions, rejected positions) of `candidate` against the tokens that came.

    `actual` is what the engine emitted for the row this step (accepted drafts plus the bonus
    token), i.e. the true continuation for `len(actual)` positions.
    """
    matched, missed = follow(candidate, 0, actual)
    return matched, int(missed)


def follow(candidate: Sequence[int], matched: int, actual: Sequence[int]) -> tuple[int, bool]:
    """(positions matched so far, whether one missed) of `candidate`, of which `matched`
    positions already matched the row's tokens, after the row emitted `actual` next.

    A shadow candidate (one never drafted) is followed this way over as many cycles as it takes
    to reach a miss or its end: a row that drafts nothing emits one token a cycle, and without
    following it, positions 2 and later of what it would have drafted are never observed and
    keep their prior (too low to draft at high batch, so never drafted: a fixed point).
    """
    limit = min(len(candidate) - matched, len(actual))
    step = 0
    while step < limit and candidate[matched + step] == actual[step]:
        step += 1
    return matched + step, step < limit


def plan_draft_lengths(values: Sequence[Sequence[float]], rows: int,
                       seconds: Callable[[np.ndarray], np.ndarray | None],
                       margin: float = 0.0) -> list[int]:
    """How many tokens each candidate row drafts this step.

    `values[i]` are the expected tokens each successive draft position of candidate row i adds
    (non-increasing), `rows` the batch size (rows decoding this step, drafting or not),
    `seconds(d)` the predicted cycle seconds when `d` tokens are drafted in all (vectorised;
    None: no measurement yet, draft nothing). Returns the per-row lengths of the best plan, or
    all zeros when no plan beats drafting nothing by `margin` (a share of its rate).
    """
    n = len(values)
    if not any(values):
        return [0] * n
    sizes = np.fromiter(map(len, values), dtype=np.int64, count=n)
    total = int(sizes.sum())
    flat = np.fromiter(chain.from_iterable(values), dtype=np.float64, count=total)
    owner = np.repeat(np.arange(n), sizes)
    positive = flat > 0.0
    if not positive.all():
        flat, owner = flat[positive], owner[positive]
        if not len(flat):
            return [0] * n
    # best first; a stable sort keeps ties in row order (a row's values never rise, so each
    # row's chosen tokens are a prefix of its draft)
    order = np.argsort(-flat, kind="stable")
    gains = np.cumsum(flat[order])
    times = seconds(np.arange(len(flat) + 1, dtype=np.float64))
    if times is None:
        return [0] * n
    rates = (rows + np.concatenate(([0.0], gains))) / times
    best = int(np.argmax(rates[1:])) + 1
    if rates[best] <= (1.0 + margin) * rates[0]:
        return [0] * n
    lengths: list[int] = np.bincount(owner[order[:best]], minlength=n).tolist()
    return lengths

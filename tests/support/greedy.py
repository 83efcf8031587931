"""Greedy tokens of two engines compared where bfloat16 can tie: equal, or equal up to a
position where the plain engine's best two tokens are within `TIE` and the other engine took
the runner-up (a verify step computes 1+k positions at once, another reduction order; the
rest follows from that token). Used by the engine scripts (`top_two`) and tests."""

from __future__ import annotations

from typing import Any

TIE = 0.0625
"""Logprob gap of a tie under bfloat16 noise (the tiny Llama's weights): 4 steps of bfloat16's
resolution (2^-6) at a logit of 4-8; a wrong token from a broken verifier is the plain engine's
runner-up, within this gap, with a chance of about 1 in the vocabulary."""


def top_two(position: dict[Any, Any]) -> list[float]:
    """A position's vLLM logprobs -> [the best token's logprob, the runner-up's id, its logprob]."""
    ranked = sorted(position.items(), key=lambda item: item[1].rank or 0)
    (_, best), (second_id, second) = ranked[0], ranked[1]
    return [best.logprob, second_id, second.logprob]


def same_greedy_tokens(on: list[list[int]], plain: list[list[int]],
                       top2: list[list[list[float]]]) -> bool:
    """Each prompt's tokens equal, or equal up to a position where the plain engine's best two
    tokens are within TIE and the other engine took the runner-up."""
    for mine, theirs, ranks in zip(on, plain, top2, strict=True):
        split = next((i for i, (a, b) in enumerate(zip(mine, theirs, strict=True)) if a != b),
                     None)
        if split is None:
            continue
        best, second_id, second = ranks[split]
        if not (best - second <= TIE and mine[split] == int(second_id)):
            return False
    return True

"""Greedy tokens of two engines compared where bfloat16 can tie: equal, or equal up to a
position where the plain engine's best two tokens are within `TIE` and the other engine took
the runner-up (a verify step computes 1+k positions at once, another reduction order; the
rest follows from that token).

The rule (`same_greedy_tokens`, `tie_split`) and the plain engine's best two tokens per
position as [best logprob, runner-up id, runner-up logprob], read from an offline engine's
logprobs (`top_two`) or from an OpenAI-compatible server's answer (`openai_tokens`: chat or
completions, streamed or not, asked with `return_tokens_as_token_ids`). Pure: no vLLM import;
used by the load test (`benchmarks/reliability/loadtest.py`) and the engine tests
(`tests/support/greedy.py` re-exports it).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

TIE = 0.0625
"""Logprob gap of a tie under bfloat16 noise (the tiny Llama's weights): 4 steps of bfloat16's
resolution (2^-6) at a logit of 4-8; a wrong token from a broken verifier is the plain engine's
runner-up, within this gap, with a chance of about 1 in the vocabulary."""
TOKEN_ID = "token_id:"
"""How vLLM writes a token with `return_tokens_as_token_ids`: "token_id:N"."""
NO_RUNNER_UP = (-1, -9999.0)
"""A position reported with fewer than two logprobs: no runner-up (-9999: vLLM's floor)."""


def top_two(position: dict[Any, Any]) -> list[float]:
    """A position's vLLM logprobs -> [the best token's logprob, the runner-up's id, its logprob]."""
    ranked = sorted(position.items(), key=lambda item: item[1].rank or 0)
    (_, best), (second_id, second) = ranked[0], ranked[1]
    return [best.logprob, second_id, second.logprob]


def first_split(mine: Sequence[int], theirs: Sequence[int]) -> int | None:
    """The first position where two token lists differ (the shorter one's length where one is
    the other's start), None where they are equal."""
    pairs = enumerate(zip(mine, theirs, strict=False))
    split = next((i for i, (a, b) in pairs if a != b), None)
    if split is None and len(mine) != len(theirs):
        return min(len(mine), len(theirs))
    return split


def tie_split(mine: Sequence[int], plain: Sequence[int],
              top2: Sequence[Sequence[float]]) -> int | None:
    """Where `mine` leaves the plain engine's tokens at a tie it took the other way: the first
    differing position, if there the plain engine's best two (`top2`, per position of `plain`)
    are within TIE and `mine` took the runner-up; else None (equal, or no such tie)."""
    split = first_split(mine, plain)
    if split is None or split >= min(len(mine), len(plain)) or split >= len(top2):
        return None
    best, second_id, second = top2[split]
    return split if best - second <= TIE and mine[split] == int(second_id) else None


def same_greedy_tokens(on: list[list[int]], plain: list[list[int]],
                       top2: list[list[list[float]]]) -> bool:
    """Each prompt's tokens equal, or equal up to a position where the plain engine's best two
    tokens are within TIE and the other engine took the runner-up."""
    return all(first_split(mine, theirs) is None or tie_split(mine, theirs, ranks) is not None
               for mine, theirs, ranks in zip(on, plain, top2, strict=True))


def _token_id(token: str) -> int:
    if not token.startswith(TOKEN_ID):
        raise ValueError(f"not a token id: {token!r} (ask with return_tokens_as_token_ids)")
    return int(token[len(TOKEN_ID):])


def _ranked(chosen: int, alternatives: dict[int, float]) -> list[float]:
    """[best logprob, runner-up id, runner-up logprob] from a position's top logprobs (the
    chosen token first among equals: greedy took it as the best)."""
    ranked = sorted(alternatives.items(), key=lambda item: (-item[1], item[0] != chosen))
    (_, best), (second_id, second) = (*ranked, NO_RUNNER_UP, NO_RUNNER_UP)[:2]
    return [best, second_id, second]


def openai_tokens(logprobs: dict[str, Any] | None) -> tuple[list[int], list[list[float]]]:
    """A choice's (or a stream chunk's) `logprobs` -> (token ids, [best logprob, runner-up id,
    runner-up logprob] per token). Chat: {"content": [{"token", "logprob", "top_logprobs":
    [{"token", "logprob"}]}]}; completions: {"tokens", "token_logprobs", "top_logprobs":
    [{token: logprob}]}; tokens as "token_id:N" (`return_tokens_as_token_ids`)."""
    ids: list[int] = []
    top2: list[list[float]] = []
    if not logprobs:
        return ids, top2
    if "content" in logprobs:  # chat
        for entry in logprobs["content"] or []:
            chosen = _token_id(entry["token"])
            alternatives = {_token_id(alt["token"]): alt["logprob"]
                            for alt in entry.get("top_logprobs") or []}
            alternatives.setdefault(chosen, entry.get("logprob", NO_RUNNER_UP[1]))
            ids.append(chosen)
            top2.append(_ranked(chosen, alternatives))
        return ids, top2
    for token, logprob, top in zip(logprobs.get("tokens") or [],
                                   logprobs.get("token_logprobs") or [],
                                   logprobs.get("top_logprobs") or [], strict=True):
        chosen = _token_id(token)
        alternatives = {_token_id(alt): value for alt, value in (top or {}).items()}
        if logprob is not None:
            alternatives.setdefault(chosen, logprob)
        ids.append(chosen)
        top2.append(_ranked(chosen, alternatives))
    return ids, top2

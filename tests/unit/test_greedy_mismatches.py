"""The load test's greedy comparison (`benchmarks/reliability/loadtest.py::greedy_mismatches`)
and what it reads from a server's answers (`benchmarks/lib/greedy.py`): two greedy answers are
equal, or part where the plain server's best two tokens tie and the speculating one took the
runner-up; anything else is reported."""

from __future__ import annotations

from typing import Any

from benchmarks.lib.greedy import openai_tokens, same_greedy_tokens
from benchmarks.reliability.loadtest import Result, greedy_mismatches
from benchmarks.reliability.request_mix import build_mix

# The plain server's answer: tokens 1 2 3, its best two per token (a tie at tokens 0 and 2).
PLAIN_IDS = [1, 2, 3]
PLAIN_TOP2 = [[-1.0, 7, -1.01], [-1.0, 8, -2.0], [-0.5, 9, -0.52]]


def answer(ids: list[int], top2: list[list[float]] | None = None, **fields: Any) -> Result:
    """A greedy result whose text is its token ids."""
    values: dict[str, Any] = {"index": 0, "kind": "greedy", "endpoint": "/v1/completions",
                              "stream": False, "status": 200, "text": " ".join(map(str, ids)),
                              "completion_tokens": len(ids), "token_ids": ids, "top2": top2,
                              **fields}
    return Result(**values)


def mismatches(spec_ids: list[int], **fields: Any) -> list[str]:
    return greedy_mismatches([answer(spec_ids, **fields)], [answer(PLAIN_IDS, PLAIN_TOP2)])


def test_equal_answers_pass() -> None:
    assert mismatches([1, 2, 3]) == []


def test_a_tie_taken_the_other_way_passes() -> None:
    assert mismatches([7, 5, 5, 5]) == []  # the runner-up at token 0; the rest follows it
    assert mismatches([1, 2, 9]) == []


def test_a_divergence_without_a_tie_is_reported() -> None:
    bad = mismatches([1, 8, 3])
    assert len(bad) == 1 and "token 1: [8] vs [2]" in bad[0] and "[-1.0, 8, -2.0]" in bad[0]


def test_a_tie_where_a_third_token_was_taken_is_reported() -> None:
    assert len(mismatches([6, 2, 3])) == 1
    assert len(mismatches([1, 2, 4])) == 1


def test_exact_equality_holds_where_the_tokens_do_not_part() -> None:
    assert len(mismatches([1, 2, 3, 4])) == 1  # one more token, no tie-divergence
    assert len(mismatches([1, 2, 3], completion_tokens=4)) == 1
    assert len(mismatches([1, 2, 3], text="1 2 x")) == 1
    # without token ids (the spec side's or both): text and token count, exactly
    assert mismatches([1, 2, 3], token_ids=None) == []
    assert len(mismatches([7, 5, 5], token_ids=None)) == 1


def test_only_greedy_answers_both_runs_served_are_compared() -> None:
    plain = [answer(PLAIN_IDS, PLAIN_TOP2)]
    assert greedy_mismatches([answer([1, 8, 3], kind="sampled")], plain) == []
    assert greedy_mismatches([answer([1, 8, 3], status=500)], plain) == []
    assert greedy_mismatches([answer([1, 8, 3])], []) == []


def test_same_greedy_tokens_reports_a_shorter_answer() -> None:
    assert not same_greedy_tokens([[1, 2]], [PLAIN_IDS], [PLAIN_TOP2])
    assert same_greedy_tokens([[7]], [PLAIN_IDS], [PLAIN_TOP2])


def test_openai_tokens_reads_chat_and_completions() -> None:
    chat = {"content": [
        {"token": "token_id:5", "logprob": -0.1,
         "top_logprobs": [{"token": "token_id:5", "logprob": -0.1},
                          {"token": "token_id:9", "logprob": -2.5}]},
        {"token": "token_id:4", "logprob": -0.7,  # an exact tie: the token taken ranks first
         "top_logprobs": [{"token": "token_id:3", "logprob": -0.7},
                          {"token": "token_id:4", "logprob": -0.7}]}]}
    assert openai_tokens(chat) == ([5, 4], [[-0.1, 9, -2.5], [-0.7, 3, -0.7]])
    completions = {"tokens": ["token_id:5", "token_id:4"], "token_logprobs": [-0.1, -0.7],
                   "top_logprobs": [{"token_id:5": -0.1, "token_id:9": -2.5},
                                    {"token_id:4": -0.7, "token_id:3": -0.9,
                                     "token_id:8": -3.0}]}
    assert openai_tokens(completions) == ([5, 4], [[-0.1, 9, -2.5], [-0.7, 3, -0.9]])
    assert openai_tokens(None) == ([], [])


def test_greedy_requests_ask_for_token_ids_and_top_two() -> None:
    greedy = [s for s in build_mix("m", 200, 1024) if s.kind == "greedy"]
    assert {s.endpoint for s in greedy} == {"/v1/completions", "/v1/chat/completions"}
    for spec in greedy:
        assert spec.body["return_tokens_as_token_ids"] is True
        chat = spec.endpoint == "/v1/chat/completions"
        assert (spec.body["logprobs"], spec.body.get("top_logprobs")) == (
            (True, 2) if chat else (2, None))

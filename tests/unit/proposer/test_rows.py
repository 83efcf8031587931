"""Which request a batch row holds (issue 29, defect 1): by vLLM's request ids where the runner
gives them (`engine/changes/worker_gpu_model_runner.py`), by tokens only where it does not
(`proposer/rows.py`).
"""

from __future__ import annotations

import numpy as np
from test_proposer import VOCAB, Simulated, make


def row_state(sim: Simulated, row: int):
    """The state the proposer holds for `row`'s request: by its id, else by the row."""
    table = sim.drafter.tracker.table
    return table.by_id.get(sim.req_ids[row]) or table.states[row]


def test_a_new_request_with_a_departed_ones_template_and_length_starts_afresh(monkeypatch):
    """Issue 29, defect 1. A chat template gives nearly every prompt the same first 8 tokens:
    request B takes request A's row after A finished, with A's first 8 tokens and a prompt as
    long as A's last token count. Matched by tokens, B inherited A's state, A's end with it, and
    never drafted; by vLLM's request ids it is a new request that drafts."""
    sim = Simulated(monkeypatch, rows=1, copying=lambda row: True, ids=True)
    sim.step()
    first = row_state(sim, 0)
    while sim.emitted[0] < len(sim.truth[0]):
        sim.step()
    last_count = int(sim.num_tokens[0])  # A's count at its last call: 200 + 96
    prompt = list(sim.token_ids[0, :8]) + [sim.rng.randrange(VOCAB) for _ in range(last_count - 8)]
    sim.queue.append((prompt, prompt[100:196]))  # B copies its prompt: easy to draft
    sim.step()  # A's last call; B takes the row
    assert sim.req_ids == ["req-1"] and int(sim.num_tokens[0]) == last_count + 1
    drafted_before = sim.drafted
    sim.step()  # B's first call
    state = row_state(sim, 0)
    assert state is not first and state.uid != first.uid
    assert state.end == last_count + 96  # B's own end, not A's
    assert sim.drafter.stats.requests == 2
    while sim.emitted[0] < len(sim.truth[0]):
        sim.step()
    assert sim.drafted - drafted_before > 48  # B drafts (most of its 96 tokens)


def test_a_request_moved_to_another_row_is_found_by_its_id():
    """vLLM condenses the batch when a request finishes: the last row moves into the hole. The
    moved request keeps its state (by id, whatever its tokens); the departed one is stopped."""
    drafter = make(rows=2)
    stopped = []
    stop = drafter.tracker.on_stop

    def spy(state):
        stopped.append(state)
        stop(state)

    drafter.tracker.on_stop = spy
    token_ids = np.zeros((2, 256), dtype=np.int32)
    num_tokens = np.full(2, 30, dtype=np.int32)
    same_tokens = list(range(100, 130))  # the same prompt in both rows: tokens cannot tell
    token_ids[0, :30] = token_ids[1, :30] = same_tokens
    ids: list[str | None] = ["a", "b"]
    drafter.request_limits = (ids, {})
    drafter.propose([[same_tokens[-1]], [same_tokens[-1]]], num_tokens, token_ids)
    a, b = drafter.tracker.table.by_id["a"], drafter.tracker.table.by_id["b"]
    ids[:] = ["b"]  # a finished; b moved into row 0, one token further
    token_ids[0, 30] = 7
    num_tokens[0] = 31
    drafter.propose([[7]], num_tokens[:1], token_ids[:1])
    assert drafter.tracker.table.by_id == {"b": b} and stopped == [a]
    assert drafter.stats.requests == 2


def test_rows_beyond_the_request_ids_are_matched_by_their_tokens():
    drafter = make(rows=2)
    token_ids = np.zeros((2, 256), dtype=np.int32)
    num_tokens = np.full(2, 30, dtype=np.int32)
    token_ids[0, :30], token_ids[1, :30] = range(100, 130), range(200, 230)
    drafter.request_limits = (["a"], {})  # no id for row 1
    drafter.propose([[129], [229]], num_tokens, token_ids)
    by_tokens = drafter.tracker.table.states[1]
    assert by_tokens is not None and drafter.tracker.table.states[0] is None
    token_ids[:, 30] = 5
    num_tokens[:] = 31
    drafter.propose([[5], [5]], num_tokens, token_ids)
    assert drafter.tracker.table.states[1] is by_tokens and drafter.stats.requests == 2

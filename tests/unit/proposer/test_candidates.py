"""Where candidates come from, and what the suffix tree is asked for (pure parts and vLLM's
real n-gram code; arctic_inference's real suffix tree where installed)."""

from __future__ import annotations

import random

import numpy as np
import pytest

from vllm_specdec_plugin.proposer import candidates as candidates_module
from vllm_specdec_plugin.proposer.candidates import (
    CandidateFinder,
    vllm_ngram_matcher,
)
from vllm_specdec_plugin.proposer.params import ADAPTIVE_PARAMS
from vllm_specdec_plugin.proposer.rows import RowTable, masked_keys
from vllm_specdec_plugin.proposer.state import RowState
from vllm_specdec_plugin.proposer.stats import CostByBatch, batch_label


def test_serial_matcher_finds_what_vllms_batch_matcher_finds():
    ngram = pytest.importorskip("vllm.v1.spec_decode.ngram_proposer")
    ours = vllm_ngram_matcher()
    assert ours is not None
    rng = np.random.default_rng(0)
    rows, width, k = 12, 512, 8
    tokens = rng.integers(0, 6, (rows, width)).astype(np.int32)  # small vocab: many matches
    counts = rng.integers(2, width, rows).astype(np.int32)
    looked = [0, 2, 3, 5, 7, 8, 11]
    theirs_draft, theirs_len = np.zeros((rows, k), np.int32), np.zeros(rows, np.int32)
    ours_draft, ours_len = np.zeros((rows, k), np.int32), np.zeros(rows, np.int32)
    bands = np.full(rows, -1, np.int32)
    ngram.batch_propose_numba(looked, counts, tokens, 3, 5, 600, k, theirs_draft, theirs_len)
    ours(np.array(looked, dtype=np.int64), counts, tokens, 3, 4, 5, 600, k, ours_draft,
         ours_len, bands)
    assert theirs_len.tolist() == ours_len.tolist() and theirs_len.any()
    for row in looked:
        assert ours_draft[row, :ours_len[row]].tolist() == (
            theirs_draft[row, :theirs_len[row]].tolist())
    # band 1: vLLM finds the same draft with matches of 4-5 tokens only; band 0: it does not
    long_draft, long_len = np.zeros((rows, k), np.int32), np.zeros(rows, np.int32)
    ngram.batch_propose_numba(looked, counts, tokens, 4, 5, 600, k, long_draft, long_len)
    for row in looked:
        assert bands[row] == (1 if long_len[row] else 0), row
    assert {int(bands[row]) for row in looked} == {0, 1}


def test_masked_keys_fast_path_equals_the_masked_one():
    rng = np.random.default_rng(1)
    tokens = rng.integers(0, 100, (6, 32)).astype(np.int32)
    long_enough = np.array([8, 9, 30, 12, 8, 20])
    short = np.array([8, 3, 30, 0, 8, 7])
    fast = masked_keys(tokens, 6, long_enough)
    slow = masked_keys(tokens, 6, short)
    assert fast.tolist() == tokens[:, :ADAPTIVE_PARAMS.key_tokens].tolist()
    assert slow[1].tolist() == tokens[1, :3].tolist() + [-1] * 5
    assert slow[3].tolist() == [-1] * ADAPTIVE_PARAMS.key_tokens


def test_store_reuses_this_cycles_keys_only_when_no_row_was_short():
    tokens = np.arange(64, dtype=np.int32).reshape(2, 32)
    table = RowTable(2)
    states = [RowState(uid=0, prompt_len=4), RowState(uid=1, prompt_len=20)]
    before = np.array([4, 20])
    _, keys = table.continuing(2, before, tokens)
    assert keys.min() == -1  # row 0 had 4 tokens: its key was masked
    table.store(states, np.array([6, 21]), tokens, keys)
    assert table.keys[0].tolist() == [0, 1, 2, 3, 4, 5, -1, -1]  # recomputed at 6 tokens
    same, _ = table.continuing(2, np.array([6, 21]), tokens)
    assert same.tolist() == [True, True]


class _FakeTree:
    """Stands in for arctic_inference's cache in the unit test of the asking rule only."""

    def __init__(self) -> None:
        self.asked: list[int] = []
        self.active_requests: set[int] = set()
        self.cached_requests: set[int] = set()  # no cross-request tree

    def start_request(self, uid, prompt):
        self.active_requests.add(uid)

    def add_active_response(self, uid, tokens):
        pass

    def speculate(self, uid, context, **kwargs):
        self.asked.append(uid)
        return None  # nothing found


def finder_with_fake_tree(monkeypatch: pytest.MonkeyPatch, rows: int) -> CandidateFinder:
    monkeypatch.setattr(candidates_module, "suffix_cache", lambda *a: _FakeTree())
    monkeypatch.setattr(candidates_module, "vllm_ngram_matcher", lambda: None)
    return CandidateFinder(rows, 8, 1024)


def test_suffix_tree_backs_off_from_rows_where_it_finds_nothing(monkeypatch):
    rows = 16
    finder = finder_with_fake_tree(monkeypatch, rows)
    states: list[RowState | None] = [RowState(uid=i, prompt_len=10) for i in range(rows)]
    tokens = np.ones((rows, 64), dtype=np.int32)
    counts = np.full(rows, 20, dtype=np.int32)
    per_cycle = []
    for cycle in range(64):
        before = len(finder.suffix.asked)
        finder.find(list(range(rows)), states, counts, tokens, cycle)
        per_cycle.append(len(finder.suffix.asked) - before)
    assert per_cycle[0] == rows  # first cycle: every row without an n-gram candidate
    # then at most each row once per `suffix_sample_every` cycles (backoff, plus the sample)
    assert sum(per_cycle[32:]) <= 2 * 32 * rows / ADAPTIVE_PARAMS.suffix_sample_every
    state = states[0]
    assert state is not None and state.suffix_wait == ADAPTIVE_PARAMS.suffix_sample_every
    finder.suffix_scored(state, 64, hit=True)  # a hit: asked again next cycle
    assert state.suffix_wait == 1 and state.suffix_next == 65


def test_dormant_finder_never_asks_the_suffix_tree(monkeypatch):
    finder = finder_with_fake_tree(monkeypatch, 8)
    states: list[RowState | None] = [RowState(uid=i, prompt_len=10) for i in range(8)]
    tokens = np.ones((8, 64), dtype=np.int32)
    for cycle in range(16):
        finder.find(list(range(8)), states, np.full(8, 20, np.int32), tokens, cycle,
                    dormant=True)
    assert finder.suffix.asked == [] and finder.suffix.active_requests == set()


def test_cost_by_batch_keeps_per_row_cost_per_bucket_and_mode():
    cost = CostByBatch()
    for rows, seconds in ((1, 100e-6), (1, 300e-6), (20, 400e-6), (31, 620e-6)):
        cost.add("awake", rows, seconds)
    cost.add("dormant", 40, 200e-6)
    summary = cost.summary()
    assert summary["awake"]["1"] == {"calls": 2, "us_per_call": 200.0, "us_per_row": 200.0}
    assert summary["awake"]["16-31"]["us_per_row"] == pytest.approx(1020 / 51, abs=0.1)
    assert summary["dormant"]["32-63"]["us_per_row"] == 5.0
    assert [batch_label(r) for r in (1, 2, 3, 4, 8, 15, 64)] == [
        "1", "2-3", "2-3", "4-7", "8-15", "8-15", "64-127"]


@pytest.mark.skipif(candidates_module.suffix_cache() is None,
                    reason="arctic_inference not installed")
def test_real_suffix_tree_drafts_a_repeated_stretch(monkeypatch):
    monkeypatch.setattr(candidates_module, "vllm_ngram_matcher", lambda: None)  # suffix only
    finder = CandidateFinder(1, 8, 1024)
    rng = random.Random(0)
    stretch = [rng.randrange(1000) for _ in range(40)]
    prompt = stretch + [rng.randrange(1000) for _ in range(10)] + stretch[:6]
    tokens = np.zeros((1, 1024), dtype=np.int32)
    tokens[0, :len(prompt)] = prompt
    state = RowState(uid=0, prompt_len=len(prompt) - 1)
    found = finder.find([0], [state], np.array([len(prompt)], np.int32), tokens, cycle=1)
    suffix = found[0].get("suffix")
    assert suffix is not None and suffix.tokens[:4] == stretch[6:10]
    assert state.suffix_synced == len(prompt)  # its tree brought up to date from the array


needs_arctic = pytest.mark.skipif(candidates_module.suffix_cache() is None,
                                  reason="arctic_inference not installed")


@needs_arctic
def test_suffix_tree_gets_at_most_the_prompts_last_tokens(monkeypatch):
    """Issue 29 item 8: the per-request build on the worker's critical path is bounded."""
    monkeypatch.setattr(candidates_module, "vllm_ngram_matcher", lambda: None)
    bound = 64
    finder = CandidateFinder(2, 8, 4096, prompt_tokens=bound)
    given: dict[int, list[int]] = {}
    real_start = finder.suffix.start_request

    def start_request(uid, prompt):
        given[uid] = prompt.tolist()
        real_start(uid, prompt)

    monkeypatch.setattr(finder.suffix, "start_request", start_request)
    rng = np.random.default_rng(2)
    tokens = rng.integers(0, 1000, (2, 4096)).astype(np.int32)
    states: list[RowState | None] = [RowState(uid=0, prompt_len=1000),
                                     RowState(uid=1, prompt_len=40)]
    finder.find([0, 1], states, np.array([1003, 41], np.int32), tokens, cycle=0)
    assert given[0] == tokens[0, 1000 - bound:1000].tolist()  # the prompt's last `bound`
    assert given[1] == tokens[1, :40].tolist()  # a shorter prompt: whole, as before
    assert [s.suffix_synced for s in states if s] == [1003, 41]  # responses from prompt_len
    assert CandidateFinder(1, 8, 1024).prompt_tokens == ADAPTIVE_PARAMS.suffix_prompt_tokens


@needs_arctic
@pytest.mark.parametrize("count_bound", ["", "4"])
def test_cached_tokens_stay_within_the_bound(monkeypatch, count_bound):
    """Many requests with answers of every length: the response tokens in the cross-request
    tree (counted from what each request gave it, not from the finder's own ledger) never
    exceed the bound, the newest requests are the ones kept, and the request count bound
    (arctic_inference's own eviction) still holds beside it."""
    monkeypatch.setattr(candidates_module, "vllm_ngram_matcher", lambda: None)
    monkeypatch.setenv("VLLM_SPECDEC_ADAPTIVE_SUFFIX_CACHE", count_bound)
    bound, rows, width = 400, 4, 512
    finder = CandidateFinder(rows, 8, width, max_cached_tokens=bound)
    rng = np.random.default_rng(3)
    tokens = rng.integers(0, 50, (rows, width)).astype(np.int32)
    counts = np.zeros(rows, np.int32)
    ends = np.zeros(rows, np.int32)
    states: list[RowState | None] = [None] * rows
    answered: dict[int, int] = {}  # uid -> response tokens it gave the tree
    uid = 0
    for cycle in range(2500):
        for i in range(rows):
            state = states[i]
            if state is None or counts[i] >= ends[i]:
                if state is not None:
                    finder.stop(state)
                prompt = int(rng.integers(5, 60))
                states[i] = RowState(uid=uid, prompt_len=prompt)
                counts[i], ends[i] = prompt, prompt + int(rng.integers(1, 120))
                tokens[i] = rng.integers(0, 50, width)
                uid += 1
            counts[i] = min(ends[i], counts[i] + int(rng.integers(1, 4)))
        finder.find(list(range(rows)), states, counts, tokens, cycle)
        for state in states:
            assert state is not None
            if state.suffix_synced >= 0:
                answered[state.uid] = state.suffix_synced - state.prompt_len
        kept = list(finder.suffix.cached_requests)
        assert sum(answered.get(u, 0) for u in kept) <= bound
        # its ledger is exact: what arctic_inference evicted by count is forgotten too
        assert finder.cached_tokens == sum(answered.get(u, 0) for u in kept)
        if count_bound:
            assert len(kept) <= int(count_bound)
    assert uid > 200 and sum(answered.values()) > 20 * bound  # many requests, many tokens
    kept = sorted(finder.suffix.cached_requests)
    assert kept and kept[-1] >= uid - rows  # the newest are kept, the oldest evicted
    assert sum(answered[u] for u in kept) > bound / 4  # the cache is used, not emptied

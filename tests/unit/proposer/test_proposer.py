"""The adaptive proposer class driven the way vLLM's model runner drives it, without an engine.

`Simulated` keeps the arrays the runner passes (`sampled_token_ids`, `num_tokens_no_spec`,
`token_ids_cpu`), verifies each draft against a known true continuation (accepted prefix plus
one bonus token) and advances a fake clock by a modelled step time, so the proposer's timing,
acceptance and dormancy run on deterministic inputs.
"""

from __future__ import annotations

import random
from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pytest

from vllm_specdec_plugin.proposer import proposer as proposer_module
from vllm_specdec_plugin.proposer.params import ADAPTIVE_PARAMS

MAX_LEN = 4096
VOCAB = 30000


def make(rows: int = 4, k: int = 8, max_len: int = MAX_LEN):
    from vllm_specdec_plugin.adaptive import AdaptiveProposer

    config = SimpleNamespace(
        speculative_config=SimpleNamespace(num_speculative_tokens=k),
        model_config=SimpleNamespace(max_model_len=max_len),
        scheduler_config=SimpleNamespace(max_num_seqs=rows))
    return AdaptiveProposer(config)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Simulated:
    """A batch of `rows` requests; `copying(row)` says whether a new request copies its prompt."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, rows: int, copying, k: int = 8,
                 seed: int = 0, ids: bool = False) -> None:
        self.clock = Clock()
        monkeypatch.setattr(proposer_module.time, "perf_counter", self.clock)
        self.rng = random.Random(seed)
        self.rows, self.copying = rows, copying
        self.drafter = make(rows, k)
        self.token_ids = np.zeros((rows, MAX_LEN), dtype=np.int32)
        self.num_tokens = np.zeros(rows, dtype=np.int32)
        self.truth: list[list[int]] = [[] for _ in range(rows)]
        self.emitted = [0] * rows
        self.sampled: list[list[int]] = [[] for _ in range(rows)]
        self.accepted = 0
        self.drafted = 0
        self.queue: list[tuple[list[int], list[int]]] = []
        """(prompt, continuation) of the next requests to load, before random ones."""
        self.req_ids: list[str | None] = [None] * rows
        self.requests: dict[str, SimpleNamespace] = {}
        if ids:  # as engine/changes/worker_gpu_model_runner.py gives them: the runner's own
            # list and dict
            self.drafter.request_limits = (self.req_ids, self.requests)
        for row in range(rows):
            self.load(row)

    def load(self, row: int) -> None:
        if self.queue:
            prompt, truth = self.queue.pop(0)
        else:
            prompt = [self.rng.randrange(VOCAB) for _ in range(200)]
            if self.copying(row):
                start = self.rng.randrange(100)
                truth = prompt[start:start + 96]
            else:
                truth = [self.rng.randrange(VOCAB) for _ in range(96)]
        req_id = f"req-{len(self.requests)}"  # vLLM: a new id for every request
        self.req_ids[row] = req_id
        self.requests[req_id] = SimpleNamespace(
            num_prompt_tokens=len(prompt), sampling_params=SimpleNamespace(max_tokens=len(truth)))
        self.token_ids[row, :len(prompt)] = prompt
        self.num_tokens[row] = len(prompt)
        self.truth[row], self.emitted[row] = truth, 0
        self.append(row, truth[:1])

    def append(self, row: int, tokens: list[int]) -> None:
        n = int(self.num_tokens[row])
        self.token_ids[row, n:n + len(tokens)] = tokens
        self.num_tokens[row] = n + len(tokens)
        self.sampled[row] = list(tokens)
        self.emitted[row] += len(tokens)

    def step(self) -> list[list[int]]:
        drafts = self.drafter.propose(self.sampled, self.num_tokens, self.token_ids)
        drafted = sum(map(len, drafts))
        # CPU-like: 50 ms fixed + 3 ms per verified token + 2 ms when anything is drafted
        self.clock.now += 0.05 + 0.003 * (self.rows + drafted) + (0.002 if drafted else 0.0)
        self.drafted += drafted
        for row in range(self.rows):
            if self.emitted[row] >= len(self.truth[row]):
                self.load(row)
                continue
            true = self.truth[row][self.emitted[row]:]
            accepted = 0
            while (accepted < len(drafts[row]) and accepted < len(true) - 1
                   and drafts[row][accepted] == true[accepted]):
                accepted += 1
            self.accepted += accepted
            self.append(row, true[:accepted + 1])
        return drafts


def test_copying_requests_get_long_drafts_accepted(monkeypatch):
    sim = Simulated(monkeypatch, rows=1, copying=lambda row: True)
    for _ in range(300):
        sim.step()
    assert sim.drafter.stats.errors == 0
    assert sim.accepted > 0.8 * sim.drafted > 0
    assert sim.accepted / sim.drafter.stats.calls > 3  # several tokens per step


def test_open_ended_requests_send_it_dormant_and_copying_ones_wake_it(monkeypatch):
    phase = {"copy": False}
    sim = Simulated(monkeypatch, rows=8, copying=lambda row: phase["copy"])
    for _ in range(150):
        sim.step()
    control = sim.drafter.control
    assert control.dormant, control.events
    entered = control.events[0]["cycle"]
    assert entered <= ADAPTIVE_PARAMS.dormant_after + 40
    assert sim.drafted <= 8 * 16  # next to nothing drafted on text it cannot predict
    phase["copy"] = True
    for row in range(sim.rows):  # every row takes a copying request now
        sim.load(row)
    woke_at = None
    for _ in range(ADAPTIVE_PARAMS.wake_every):
        sim.step()
        if not control.dormant:
            woke_at = control.cycle
            break
    assert woke_at is not None and woke_at - 150 <= 40, control.events
    assert control.events[-1]["state"] == "awake"
    assert control.events[-1]["why"] == "probed rows would draft"
    before = sim.accepted
    for _ in range(100):
        sim.step()
    assert sim.accepted - before > 100


@pytest.mark.parametrize("stall_s", [0.5, 2.0])
def test_a_stalled_first_cycle_does_not_price_drafting_out(monkeypatch, stall_s):
    """Open-ended text first, its first clean cycle stalled (a loaded host, a JIT compile),
    then copying text. The prior's cost fit, made in the baseline's seconds of that moment and
    kept until drafting cycles refit it, priced every draft out once the baseline settled:
    none came to refit it, so the copying requests never drafted (a CI run of
    tests/engine/test_adaptive.py: nothing drafted in 480 cycles)."""
    phase = {"copy": False}
    rng = random.Random(1)
    sim = Simulated(monkeypatch, rows=2, copying=lambda row: phase["copy"])
    for row in range(sim.rows):  # open-ended text that repeats 4 of its prompt's tokens early:
        prompt = [rng.randrange(VOCAB) for _ in range(200)]  # a candidate while stalled
        sim.queue.append((prompt, prompt[50:54] + [rng.randrange(VOCAB) for _ in range(92)]))
        sim.load(row)
    sim.step()  # new requests: not a clean cycle, not timed
    sim.clock.now += stall_s  # the first clean cycle, stalled
    for _ in range(150):
        sim.step()
    phase["copy"] = True
    for row in range(sim.rows):
        sim.load(row)
    before = sim.accepted
    for _ in range(100):
        sim.step()
    assert sim.accepted - before > 100, (sim.drafter.control.events,
                                         sim.drafter.cost.summary())


def test_dormant_cycles_look_at_a_share_of_the_rows(monkeypatch):
    sim = Simulated(monkeypatch, rows=32, copying=lambda row: False)
    for _ in range(120):
        sim.step()
    stats = sim.drafter.stats
    assert sim.drafter.control.dormant
    probed_before, calls_before = stats.probed_rows, stats.calls
    for _ in range(40):
        sim.step()
    per_cycle = (stats.probed_rows - probed_before) / (stats.calls - calls_before)
    assert per_cycle <= 32 / 8 + 2  # 1/probe_every of the rows, plus new requests once


def test_forced_no_draft_cycles_keep_the_baseline_measured(monkeypatch):
    sim = Simulated(monkeypatch, rows=1, copying=lambda row: True)
    for _ in range(400):
        sim.step()
    stats = sim.drafter.stats
    assert stats.baseline_cycles >= 2  # the first one, then at least one refresh
    baseline = sim.drafter.cost.baseline(1)
    assert baseline == pytest.approx(0.05 + 0.003, rel=0.05)


def test_row_reused_by_another_request_starts_a_fresh_history():
    drafter = make()
    token_ids = np.zeros((4, 256), dtype=np.int32)
    num_tokens = np.zeros(4, dtype=np.int32)
    first = [1, 2, 3, 4, 5, 6, 7, 8] * 4

    def put(row, tokens):
        token_ids[row, :len(tokens)] = tokens
        num_tokens[row] = len(tokens)

    put(0, first)
    drafter.propose([[first[-1]]], num_tokens, token_ids)
    for _ in range(5):  # the same request goes on: one request seen
        n = int(num_tokens[0])
        token = first[n % 8]
        put(0, list(token_ids[0, :n]) + [token])
        drafter.propose([[token]], num_tokens, token_ids)
    assert drafter.stats.requests == 1
    other = [9, 10, 11, 12] * 3
    put(0, other)  # row 0 now holds a new request
    drafter.propose([[other[-1]]], num_tokens, token_ids)
    assert drafter.stats.requests == 2
    state = drafter.tracker.table.states[0]
    assert state is not None and state.evidence.factor("ngram") == 1.0


def test_a_request_moved_to_another_row_keeps_its_history():
    """vLLM condenses the batch when a request finishes: the last row moves into the hole."""
    drafter = make(rows=2)
    token_ids = np.zeros((2, 256), dtype=np.int32)
    num_tokens = np.zeros(2, dtype=np.int32)
    a, b = list(range(100, 130)), list(range(200, 230))
    token_ids[0, :30], token_ids[1, :30] = a, b
    num_tokens[:] = 30
    drafter.propose([[a[-1]], [b[-1]]], num_tokens, token_ids)
    moved = drafter.tracker.table.states[1]
    token_ids[0, :31] = b + [7]  # request b now in row 0, one token further
    num_tokens[0] = 31
    drafter.propose([[7]], num_tokens[:1], token_ids[:1])
    assert drafter.stats.requests == 2 and drafter.tracker.table.states[0] is moved


def test_internal_error_drafts_nothing_and_is_logged_once():
    drafter = make()
    logged = []
    drafter._logger = SimpleNamespace(exception=lambda msg, *a: logged.append(msg),
                                      debug=lambda *a: None)
    token_ids = np.zeros((4, 256), dtype=np.int32)
    num_tokens = np.array([10, 0, 0, 0], dtype=np.int32)
    bad = [[1], [2]]  # two rows sampled, but the arrays disagree: must not raise
    assert drafter.propose(bad, num_tokens[:1], token_ids) == [[], []]
    assert drafter.propose(bad, num_tokens[:1], token_ids) == [[], []]
    assert drafter.stats.errors == 2
    assert len(logged) == 1 and "adaptive proposer failed" in logged[0]


def test_an_undrafted_candidate_is_followed_to_its_first_miss():
    from vllm_specdec_plugin.proposer.state import Candidate, RowState

    drafter = make()
    state = RowState(uid=0, prompt_len=10)
    key = ("ngram", 0, False)
    state.candidates = {"ngram": Candidate([1, 2, 3, 4, 5], 0, False)}
    drafter.learner.score(state, [1], 0, 0)
    assert state.shadows["ngram"].matched == 1
    state.candidates = {"ngram": Candidate([7], 0, False)}  # not followed: one at a time
    drafter.learner.score(state, [2, 3], 0, 0)  # two tokens (another source's draft was accepted)
    assert state.shadows["ngram"].matched == 3
    hits, trials = drafter.learner.pooled._hits[key], drafter.learner.pooled._trials[key]
    assert (hits[:3], trials[:3]) == (pytest.approx([1, 1, 1], rel=0.01),
                                      pytest.approx([1, 1, 1], rel=0.01))  # counted as they came
    drafter.learner.score(state, [9], 0, 0)  # position 4 missed
    assert not state.shadows
    assert (hits[:3], trials[:3]) == (pytest.approx([1, 1, 1], rel=0.01),
                                      pytest.approx([1, 1, 2], rel=0.01))  # 1-3 hit; 4 missed
    assert drafter.learner.pooled.rates(key) != ADAPTIVE_PARAMS.prior_rate
    assert state.evidence.hits["ngram"] == 3  # the row's evidence: once, when it resolved


def test_rows_that_never_draft_still_learn_every_draft_position(monkeypatch):
    """At high batch only surely-accepted tokens pay; if positions 2+ kept their prior because
    no row drafted them, no row would ever draft them."""
    monkeypatch.setattr(proposer_module, "plan_draft_lengths",
                        lambda values, *args: [0] * len(values))
    sim = Simulated(monkeypatch, rows=16, copying=lambda row: True)
    for _ in range(40):
        sim.step()
    assert sim.drafted == 0
    rates = sim.drafter.learner.pooled.rates(("ngram", 1, True))  # 4-5 token matches
    assert min(rates[:4]) > 0.9, rates  # positions 1, 2, 3-4, 5-8 of copying rows


def test_the_stats_file_ends_with_the_last_call(monkeypatch, tmp_path):
    """Written every `stats_every` calls and at new requests, and once more after the engine has
    gone idle: the run's last calls are in it."""
    import json
    import time

    from vllm_specdec_plugin.core.settings import ENV_ADAPTIVE_STATS

    path = tmp_path / "stats.json"
    monkeypatch.setenv(ENV_ADAPTIVE_STATS, str(path))
    monkeypatch.setattr(proposer_module.AdaptiveProposer, "params",
                        replace(ADAPTIVE_PARAMS, stats_idle_s=0.05))
    sim = Simulated(monkeypatch, rows=2, copying=lambda row: False)
    calls = ADAPTIVE_PARAMS.stats_every + 3
    for _ in range(calls):
        sim.step()
    assert sim.drafter.stats.requests == 2  # no new request forced the last writes
    deadline = time.monotonic() + 10
    while json.loads(path.read_text())["calls"] != calls and time.monotonic() < deadline:
        time.sleep(0.05)
    assert json.loads(path.read_text())["calls"] == calls


def test_no_draft_reaches_past_the_requests_last_token(monkeypatch):
    """Given the runner's requests (engine/changes/worker_gpu_model_runner.py), a copying request
    near its max_tokens drafts only what it can still emit: vLLM would verify the rest and drop
    it."""
    sim = Simulated(monkeypatch, rows=4, copying=lambda row: True, ids=True)
    end = 200 + 96  # every simulated request: a 200-token prompt, then 96 tokens
    binding = 0
    for _ in range(200):
        counts = sim.num_tokens.copy()
        drafts = sim.step()
        for row, draft in enumerate(drafts):
            assert len(draft) <= max(end - int(counts[row]) - 1, 0)
            binding += bool(draft) and len(draft) == end - int(counts[row]) - 1
    stats = sim.drafter.stats
    assert stats.limited_requests == stats.requests > 4 and binding > 0

"""The plugin's own draft-free proposer, loaded by vLLM's `custom_class` speculative method.

    speculative_config={"method": "custom_class",
                        "model": "vllm_specdec_plugin.adaptive.AdaptiveProposer",
                        "num_speculative_tokens": 8}

vLLM (0.32 and 0.33, V1 model runner) builds `AdaptiveProposer(vllm_config)` in the worker, calls
`load_model(model)` (CPU runner) and, after each step's bookkeeping,
`propose(sampled_token_ids, num_tokens_no_spec, token_ids_cpu, slot_mappings=...)`, expecting one
draft list per batch row ([] = no draft). Each step it:

- finds candidates per row: vLLM's own n-gram matcher over prompt + output, and a suffix-tree
  match (arctic_inference's SuffixDecodingCache) when that package is installed;
- scores every candidate it made last step against the tokens that came (drafted or not), per
  row and per source, and picks the source with the higher expected accepted length;
- times the gaps between its calls against the tokens each step verified to learn what a
  verified token costs, and drafts a token only where its expected acceptance pays for it
  (`policy.plan_draft_lengths`).

The proposer sees row indices, not request ids. A row is recognised as the same request when its
first tokens and its token count continue from the previous step (and its accepted tokens are a
prefix of what was drafted for it); anything else is a new request with a fresh history.
Any internal error drafts nothing for that step and is logged once: the engine never sees it.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from itertools import count
from typing import Any

import numpy as np

from vllm_specdec_plugin.core.methods import ADAPTIVE_CLASS_PATH
from vllm_specdec_plugin.core.settings import ENV_ADAPTIVE_STATS
from vllm_specdec_plugin.proposer.candidates import (
    SUFFIX_MIN_TOKEN_PROB,
    SUFFIX_TREE_DEPTH,
    suffix_cache,
    vllm_ngram_matcher,
)
from vllm_specdec_plugin.proposer.policy import (
    GLOBAL_DECAY,
    GLOBAL_PRIOR_ALPHA,
    GLOBAL_PRIOR_WEIGHT,
    ROW_DECAY,
    ROW_PRIOR_WEIGHT,
    Acceptance,
    StepCostModel,
    expected_tokens,
    outcome,
    plan_draft_lengths,
)
from vllm_specdec_plugin.proposer.rows import KEY_TOKENS, SOURCES, RowState, claim, continues
from vllm_specdec_plugin.proposer.stats import write_stats

CLASS_PATH = ADAPTIVE_CLASS_PATH
DEFAULT_NUM_SPECULATIVE_TOKENS = 8
# N-gram lengths for vLLM's matcher: longest match of 3..5 tokens (KAITO's static config uses 4).
NGRAM_MIN, NGRAM_MAX = 3, 5
# A gap between calls longer than this many predicted steps is idle time, not a step.
IDLE_FACTOR = 4.0
ENV_STATS = ENV_ADAPTIVE_STATS
STATS_EVERY = 25


class AdaptiveProposer:
    """Draft-free proposer that reads acceptance and load (see the module docstring)."""

    def __init__(self, vllm_config: Any) -> None:
        spec = vllm_config.speculative_config
        self.k = int(spec.num_speculative_tokens or DEFAULT_NUM_SPECULATIVE_TOKENS)
        self.max_model_len = int(vllm_config.model_config.max_model_len)
        max_rows = int(vllm_config.scheduler_config.max_num_seqs)
        self._ngram_draft = np.zeros((max_rows, self.k), dtype=np.int32)
        self._ngram_lengths = np.zeros(max_rows, dtype=np.int32)
        from vllm.logger import init_logger

        self._logger = init_logger("vllm.specdec_plugin.adaptive")
        self._batch_ngram = vllm_ngram_matcher()
        self._suffix = suffix_cache()
        self._warm_up()
        self._states: dict[tuple[bytes, int], list[RowState]] = {}
        self._global = {source: Acceptance() for source in SOURCES}
        self.cost = StepCostModel()
        self._uids = count()
        self._last_call: float | None = None
        self._last_tokens = 0
        self._last_drafted = False
        self._last_rows = 0
        self._failed = False
        self._stats_path = os.environ.get(ENV_STATS) or None
        self._requests_written = 0.0
        self.stats: dict[str, float] = {
            "calls": 0, "rows": 0, "overhead_s": 0.0, "requests": 0, "draft_tokens": 0,
            "accepted_tokens": 0, "steps_timed": 0, "errors": 0}

    def load_model(self, *args: Any, **kwargs: Any) -> None:
        """No model: the CPU model runner calls this for every drafter."""

    def propose(self, sampled_token_ids: list[list[int]], num_tokens_no_spec: np.ndarray,
                token_ids_cpu: np.ndarray, slot_mappings: Any = None) -> list[list[int]]:
        """One draft list per batch row; never raises."""
        start = time.perf_counter()
        try:
            drafts = self._propose(start, sampled_token_ids, num_tokens_no_spec, token_ids_cpu)
        except Exception:
            self.stats["errors"] += 1
            if not self._failed:
                self._failed = True
                self._logger.exception("adaptive proposer failed; drafting nothing this step "
                                       "(logged once)")
            self._reset()
            drafts = [[] for _ in sampled_token_ids]
        end = time.perf_counter()
        self.stats["calls"] += 1
        self.stats["rows"] += len(sampled_token_ids)
        self.stats["overhead_s"] += end - start
        if self._stats_path and (self.stats["calls"] % STATS_EVERY == 0
                                 or self.stats["requests"] != self._requests_written):
            self._requests_written = self.stats["requests"]
            write_stats(self._stats_path, self.stats, self.cost.estimate(), {
                source: self._global[source].alpha(GLOBAL_PRIOR_ALPHA, GLOBAL_PRIOR_WEIGHT)
                for source in SOURCES}, self._suffix is not None, self._logger)
        return drafts

    def _reset(self) -> None:
        """Forget every row (after an internal error): all requests start afresh."""
        self._states = {}
        self._last_call = None
        if self._suffix is not None:
            try:
                for uid in list(self._suffix.active_requests):
                    self._suffix.stop_request(uid)
            except Exception:  # a broken cache: start a new one
                self._suffix = suffix_cache()

    # -- one step ---------------------------------------------------------------------------

    def _propose(self, now: float, sampled: list[list[int]], num_tokens: np.ndarray,
                 token_ids: np.ndarray) -> list[list[int]]:
        rows = len(sampled)
        states, fresh = self._match_rows(sampled, num_tokens, token_ids)
        self._time_last_step(now, rows, clean=not fresh and all(sampled))
        decoding = [i for i in range(rows)
                    if sampled[i] and num_tokens[i] < self.max_model_len - 1]
        candidates = self._candidates(decoding, states, num_tokens, token_ids)
        limits, alphas = [], []
        for i in decoding:
            state = states[i]
            assert state is not None  # every decoding row has a state (_match_rows)
            draft, alpha = self._best(state, candidates[i])
            state.draft = draft  # the full candidate; cut to the plan below
            room = self.max_model_len - 1 - int(num_tokens[i])
            limits.append(min(len(draft), self.k, max(room, 0)))
            alphas.append(alpha)
        lengths = plan_draft_lengths(limits, alphas, len(decoding), self.cost.estimate())
        drafts: list[list[int]] = [[] for _ in range(rows)]
        drafted = 0
        for i, length in zip(decoding, lengths, strict=True):
            state = states[i]
            assert state is not None
            drafts[i] = state.draft[:length]
            state.draft = drafts[i]
            drafted += length
        self._remember(states, rows)
        self._last_call = time.perf_counter()
        self._last_tokens = len(decoding) + drafted
        self._last_drafted = drafted > 0
        self._last_rows = rows
        self.stats["draft_tokens"] += drafted
        return drafts

    def _match_rows(self, sampled: list[list[int]], num_tokens: np.ndarray,
                    token_ids: np.ndarray) -> tuple[list[RowState | None], bool]:
        """Each row's state: its request's history if it continues, else a fresh one."""
        previous, self._states = self._states, {}
        states: list[RowState | None] = []
        fresh = False
        for i, new in enumerate(sampled):
            n = int(num_tokens[i])
            before = n - len(new)
            state = claim(previous, token_ids[i, :min(KEY_TOKENS, before)].tobytes(),
                                before, i)
            if state is not None and new and not continues(state, new):
                self._stop(state)
                state = None
            if state is None:
                if not new:  # a partial prefill: nothing to draft or learn yet
                    states.append(None)
                    continue
                state = self._start(i, n, new, token_ids)
                fresh = True
            else:
                self._score(state, new)
                if self._suffix is not None and new:
                    self._suffix.add_active_response(state.uid, list(new))
            state.row, state.tokens = i, n
            state.key = token_ids[i, :min(KEY_TOKENS, n)].tobytes()
            states.append(state)
        for leftovers in previous.values():  # requests gone from the batch
            for state in leftovers:
                self._stop(state)
        return states, fresh

    def _start(self, row: int, n: int, new: list[int], token_ids: np.ndarray) -> RowState:
        uid = next(self._uids)
        self.stats["requests"] += 1
        state = RowState(uid=uid, row=row, tokens=n, key=b"")
        if self._suffix is not None:
            prompt = np.ascontiguousarray(token_ids[row, :n - len(new)], dtype=np.int32)
            self._suffix.start_request(uid, prompt)
            self._suffix.add_active_response(uid, list(new))
        return state

    def _stop(self, state: RowState) -> None:
        if self._suffix is not None and state.uid in self._suffix.active_requests:
            self._suffix.stop_request(state.uid)

    def _score(self, state: RowState, new: Sequence[int]) -> None:
        """Learn from last step's candidates (drafted or shadow) against the tokens that came."""
        if state.draft:
            accepted = len(new) - 1
            self.stats["accepted_tokens"] += accepted
        for source, candidate in state.candidates.items():
            hits, misses = outcome(candidate, new)
            if hits or misses:
                state.acceptance[source].observe(hits, misses, ROW_DECAY)
                self._global[source].observe(hits, misses, GLOBAL_DECAY)
        state.candidates = {}

    def _time_last_step(self, now: float, rows: int, clean: bool) -> None:
        """Feed the gap since the last call to the cost model, when it was one decode step."""
        if self._last_call is None or not clean or rows != self._last_rows:
            return  # a prefill ran in that step, or the batch changed shape: not a clean sample
        gap = now - self._last_call
        estimate = self.cost.estimate()
        if estimate is not None and gap > IDLE_FACTOR * estimate.seconds(
                self._last_tokens, self._last_drafted):
            return
        self.cost.observe(self._last_tokens, self._last_drafted, gap)
        self.stats["steps_timed"] += 1

    def _candidates(self, decoding: list[int], states: list[RowState | None],
                    num_tokens: np.ndarray, token_ids: np.ndarray
                    ) -> dict[int, dict[str, list[int]]]:
        found: dict[int, dict[str, list[int]]] = {i: {} for i in decoding}
        if decoding and self._batch_ngram is not None:
            self._ngram_lengths[:] = 0
            self._run_ngram(decoding, num_tokens, token_ids)
            for i in decoding:
                length = int(self._ngram_lengths[i])
                if length:
                    found[i]["ngram"] = self._ngram_draft[i, :length].tolist()
        if self._suffix is not None:
            for i in decoding:
                state = states[i]
                assert state is not None
                n = int(num_tokens[i])
                context = np.ascontiguousarray(
                    token_ids[i, max(0, n - SUFFIX_TREE_DEPTH):n], dtype=np.int32)
                draft = self._suffix.speculate(
                    state.uid, context, max_spec_tokens=self.k,
                    min_token_prob=SUFFIX_MIN_TOKEN_PROB)
                if draft.token_ids:
                    found[i]["suffix"] = list(draft.token_ids)
        for i in decoding:
            state = states[i]
            assert state is not None
            state.candidates = found[i]
        return found

    def _best(self, state: RowState | None, candidates: dict[str, list[int]]
              ) -> tuple[list[int], tuple[float, float]]:
        """The candidate with the higher expected accepted length, and its row's alpha."""
        assert state is not None
        best: tuple[float, list[int], tuple[float, float]] = (0.0, [], (0.0, 0.0))
        for source, draft in candidates.items():
            prior = self._global[source].alpha(GLOBAL_PRIOR_ALPHA, GLOBAL_PRIOR_WEIGHT)
            alpha = state.acceptance[source].alpha(prior, ROW_PRIOR_WEIGHT)
            expected = expected_tokens(min(len(draft), self.k), alpha)
            if expected > best[0]:
                best = (expected, draft, alpha)
        return best[1], best[2]

    def _remember(self, states: list[RowState | None], rows: int) -> None:
        for state in states[:rows]:
            if state is not None:
                self._states.setdefault((state.key, state.tokens), []).append(state)

    def _warm_up(self) -> None:
        """Compile vLLM's numba matcher now, not on the first request."""
        if self._batch_ngram is None:
            return
        tokens = np.arange(32, dtype=np.int32).reshape(1, 32) % 4
        self._run_ngram([0], np.array([32], dtype=np.int32), tokens)

    def _run_ngram(self, rows: list[int], num_tokens: np.ndarray, token_ids: np.ndarray) -> None:
        """vLLM's matcher on one thread, as vLLM's ngram proposer runs it for small batches."""
        import numba

        threads = numba.get_num_threads()
        numba.set_num_threads(1)
        try:
            self._batch_ngram(rows, num_tokens, token_ids, NGRAM_MIN, NGRAM_MAX,
                              self.max_model_len, self.k, self._ngram_draft, self._ngram_lengths)
        finally:
            numba.set_num_threads(threads)

"""Where the adaptive proposer's candidate drafts come from: vLLM's own numba n-gram matcher
(the `ngram` method's code) and arctic_inference's suffix tree, when installed.

`CandidateFinder.find` looks only at the rows it is given (all rows when the proposer is awake,
a rotating share when it is dormant). The suffix tree is asked only where the n-gram candidate
is missing or shorter than `SUFFIX_SHORT` tokens, plus a rotating 1/`SUFFIX_SAMPLE_EVERY` of the
rows so its statistics stay measured, and each row's tree is brought up to date lazily: its new
tokens are added from the token array when the row is next looked at, not every cycle (a
request the proposer never looks at again leaves its last tokens out of the cross-request tree).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import numpy as np

from vllm_specdec_plugin.core.settings import ENV_ADAPTIVE_SUFFIX_CACHE
from vllm_specdec_plugin.proposer.acceptance import strength_band
from vllm_specdec_plugin.proposer.rows import Candidate, RowState

SUFFIX_TREE_DEPTH = 24
SUFFIX_MAX_CACHED_REQUESTS = 10000
SUFFIX_MIN_TOKEN_PROB = 0.1
# N-gram lengths for vLLM's matcher: longest match of 3..5 tokens (KAITO's static config uses 4).
NGRAM_MIN, NGRAM_MAX = 3, 5
SUFFIX_SHORT = 4
SUFFIX_SAMPLE_EVERY = 8


def vllm_ngram_matcher() -> Any:
    """vLLM's numba batch n-gram matcher (the `ngram` method's own code), or None if absent."""
    try:
        from vllm.v1.spec_decode.ngram_proposer import batch_propose_numba
    except ImportError:
        return None
    return batch_propose_numba


def cached_requests(environ: Mapping[str, str]) -> int:
    """VLLM_SPECDEC_ADAPTIVE_SUFFIX_CACHE: finished requests the suffix tree keeps (>= 0)."""
    raw = environ.get(ENV_ADAPTIVE_SUFFIX_CACHE, "").strip()
    if not raw:
        return SUFFIX_MAX_CACHED_REQUESTS
    if not raw.isdigit() or len(raw) > 9:
        raise ValueError(f"{ENV_ADAPTIVE_SUFFIX_CACHE}={raw[:40]!r}: expected a whole number of "
                         f"requests from 0 to 999999999 (unset: {SUFFIX_MAX_CACHED_REQUESTS})")
    return int(raw)


def suffix_cache(max_cached: int = SUFFIX_MAX_CACHED_REQUESTS) -> Any:
    """arctic_inference's suffix-tree cache, or None when the package is not installed.

    `max_cached` finished requests' responses stay in its global tree for later requests
    (0: each request drafts from its own prompt and output only)."""
    try:
        from arctic_inference.suffix_decoding import SuffixDecodingCache
    except ImportError:
        return None
    return SuffixDecodingCache(max_tree_depth=SUFFIX_TREE_DEPTH, max_cached_requests=max_cached)


class CandidateFinder:
    """Both sources, sized for a batch of `max_rows` rows and drafts of up to `k` tokens."""

    def __init__(self, max_rows: int, k: int, max_model_len: int) -> None:
        self.k, self.max_model_len = k, max_model_len
        self._draft = np.zeros((max_rows, k), dtype=np.int32)
        self._lengths = np.zeros(max_rows, dtype=np.int32)
        self._ngram = vllm_ngram_matcher()
        self.max_cached = cached_requests(os.environ)
        self.suffix = suffix_cache(self.max_cached)
        self.suffix_calls = 0
        self._warm_up()

    def find(self, rows: list[int], states: list[RowState | None], counts: np.ndarray,
             token_ids: np.ndarray, cycle: int, dormant: bool = False
             ) -> dict[int, dict[str, Candidate]]:
        """Each looked-at row's candidates by source (also stored on its state). Dormant, the
        suffix tree is asked only for the rotating sample of rows: a new request's first
        suffix query builds the tree of its whole prompt, the largest cost per row."""
        found: dict[int, dict[str, Candidate]] = {i: {} for i in rows}
        if not rows:
            return found
        if self._ngram is not None:
            self._lengths[:] = 0
            self._run_ngram(rows, counts, token_ids)
            for i in rows:
                length = int(self._lengths[i])
                state = states[i]
                if length and state is not None:
                    found[i]["ngram"] = Candidate(self._draft[i, :length].tolist(), 0,
                                                  state.evidence.last_full["ngram"])
        if self.suffix is not None:
            for i in rows:
                sampled = (i + cycle) % SUFFIX_SAMPLE_EVERY == 0
                ngram = found[i].get("ngram")
                short = ngram is None or len(ngram.tokens) < SUFFIX_SHORT
                if not sampled and (dormant or not short):
                    continue
                state = states[i]
                assert state is not None
                draft = self._speculate(state, i, int(counts[i]), token_ids)
                if draft is not None and draft.token_ids:
                    probs = list(draft.probs)
                    band = strength_band("suffix", sum(probs) / len(probs) if probs else None)
                    found[i]["suffix"] = Candidate(list(draft.token_ids), band,
                                                   state.evidence.last_full["suffix"])
        for i in rows:
            state = states[i]
            assert state is not None
            state.candidates = found[i]
            state.probed = True
        return found

    def stop(self, state: RowState) -> None:
        """The request left the batch: end it in the suffix tree (its response stays cached)."""
        if (self.suffix is not None and state.suffix_synced >= 0
                and state.uid in self.suffix.active_requests):
            self.suffix.stop_request(state.uid)

    def reset(self) -> None:
        """Forget every active request (after an internal error)."""
        if self.suffix is None:
            return
        try:
            for uid in list(self.suffix.active_requests):
                self.suffix.stop_request(uid)
        except Exception:  # a broken cache: start a new one
            self.suffix = suffix_cache(self.max_cached)

    def _speculate(self, state: RowState, row: int, n: int, token_ids: np.ndarray) -> Any:
        """The suffix tree's draft for a row, after bringing its tree up to date."""
        assert self.suffix is not None
        self.suffix_calls += 1
        if state.suffix_synced < 0:
            prompt = np.ascontiguousarray(token_ids[row, :state.prompt_len], dtype=np.int32)
            self.suffix.start_request(state.uid, prompt)
            state.suffix_synced = state.prompt_len
        if n > state.suffix_synced:
            self.suffix.add_active_response(state.uid, np.ascontiguousarray(
                token_ids[row, state.suffix_synced:n], dtype=np.int32))
            state.suffix_synced = n
        context = np.ascontiguousarray(token_ids[row, max(0, n - SUFFIX_TREE_DEPTH):n],
                                       dtype=np.int32)
        return self.suffix.speculate(state.uid, context, max_spec_tokens=self.k,
                                     min_token_prob=SUFFIX_MIN_TOKEN_PROB)

    def _warm_up(self) -> None:
        """Compile vLLM's numba matcher now, not on the first request, on one thread: vLLM's
        ngram proposer runs it single-threaded for small batches too, and with custom_class
        nothing else in the worker uses numba, so the thread count is set once, not per call."""
        if self._ngram is None:
            return
        import numba

        numba.set_num_threads(1)
        tokens = np.arange(32, dtype=np.int32).reshape(1, 32) % 4
        self._run_ngram([0], np.array([32], dtype=np.int32), tokens)

    def _run_ngram(self, rows: list[int], num_tokens: np.ndarray, token_ids: np.ndarray) -> None:
        self._ngram(rows, num_tokens, token_ids, NGRAM_MIN, NGRAM_MAX, self.max_model_len,
                    self.k, self._draft, self._lengths)

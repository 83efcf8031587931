"""Where the adaptive proposer's candidate drafts come from: vLLM's own numba n-gram matcher
(the `ngram` method's code) and arctic_inference's suffix tree, when installed.

`CandidateFinder.find` looks only at the rows it is given (all rows when the proposer is awake,
a rotating share when it is dormant). The n-gram matcher is the cheap source (one numba call for
all rows, ~0.6 µs per row and match-length band at 400 tokens); the suffix tree costs ~10-25 µs
per query and ~200 µs per request (building the tree of its prompt, then freeing it), so it is
asked only

- when the proposer is awake (a dormant proposer probes with the n-gram matcher alone and wakes
  fully, both sources, at the latest every `wake_every` cycles);
- where the n-gram candidate is missing or shorter than `suffix_short` tokens, and the row's
  own suffix record allows it: a query that found nothing, or whose first token missed, doubles
  the cycles until the row is asked again (up to `suffix_sample_every`), a hit resets it;
- plus a rotating 1/`suffix_sample_every` of the rows, so its statistics stay measured.

Each row's tree is brought up to date lazily: its new tokens are added from the token array when
the row is next asked, not every cycle (a request the proposer never asks again leaves its last
tokens out of the cross-request tree). A request's own tree holds the last
`suffix_prompt_tokens` tokens of its prompt: building and freeing it costs ~0.8 µs per prompt
token (~830 µs for a 1,000-token prompt, ~35 µs per row per step over a 24-token answer, the
largest share of the proposer's cost on long prompts), so the bound caps that cost on the
worker's critical path (~1.6 ms a request) and changes nothing for shorter prompts. Keeping
only the last 256 tokens would cut the cost for a 1,000-token prompt by three quarters, but the
tree then misses copies from earlier in the prompt where the n-gram matcher found nothing long;
that trade needs a paired run, not made yet.

The cross-request tree (finished and running requests' responses) is bounded twice: by
`VLLM_SPECDEC_ADAPTIVE_SUFFIX_CACHE` requests (arctic_inference evicts the oldest) and by
`suffix_max_cached_tokens` tokens in all (evicted here, oldest request first), so long answers
cannot grow a worker's memory (~260-300 bytes a cached token) without end.

The names in backquotes are fields of `params.AdaptiveParams`.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from vllm_specdec_plugin.core.settings import ENV_ADAPTIVE_SUFFIX_CACHE
from vllm_specdec_plugin.proposer.acceptance import strength_band
from vllm_specdec_plugin.proposer.params import ADAPTIVE_PARAMS, AdaptiveParams
from vllm_specdec_plugin.proposer.state import Candidate, RowState


@functools.cache
def vllm_ngram_matcher() -> Any:
    """A serial batch loop over vLLM's own n-gram matching function (the `ngram` method's
    code, `_find_longest_matched_ngram_and_propose_tokens`, in vLLM 0.30, 0.32 and 0.33), or
    None where it is absent.

    Not vLLM's `batch_propose_numba`: that is `parallel=True`, and entering its parallel region
    costs ~5 µs per call plus ~1.8 µs per row even on one thread, and it takes the rows as a
    Python list that numba unboxes on every call; this loop takes them as an int64 array and
    costs ~1.3 µs per call plus ~0.6 µs per row (400-token contexts, on this 2-core host).
    One per process (cached): each new numba function would compile again."""
    try:
        import numba
        from vllm.v1.spec_decode.ngram_proposer import (
            _find_longest_matched_ngram_and_propose_tokens as match,
        )
    except ImportError:
        return None

    @numba.njit(nogil=True)
    def batch(rows: np.ndarray, num_tokens: np.ndarray, token_ids: np.ndarray, min_n: int,
              long_n: int, max_n: int, max_model_len: int, k: int, draft: np.ndarray,
              lengths: np.ndarray, bands: np.ndarray) -> None:  # pragma: no cover (compiled)
        for j in range(rows.shape[0]):
            row = rows[j]
            tokens = token_ids[row, :num_tokens[row]]
            # the longest match of long_n..max_n tokens first (band 1), else of min_n..long_n-1
            # (band 0): vLLM's function does not say how long its match was
            found = match(tokens, long_n, max_n, max_model_len, k)
            bands[row] = 1
            if found.shape[0] == 0 and min_n < long_n:
                found = match(tokens, min_n, long_n - 1, max_model_len, k)
                bands[row] = 0
            lengths[row] = found.shape[0]
            if found.shape[0]:
                draft[row, :found.shape[0]] = found

    return batch


def cached_requests(environ: Mapping[str, str],
                    default: int = ADAPTIVE_PARAMS.suffix_max_cached_requests) -> int:
    """VLLM_SPECDEC_ADAPTIVE_SUFFIX_CACHE: finished requests the suffix tree keeps (>= 0;
    unset: `default`, the field `suffix_max_cached_requests`)."""
    raw = environ.get(ENV_ADAPTIVE_SUFFIX_CACHE, "").strip()
    if not raw:
        return default
    if not raw.isdigit() or len(raw) > 9:
        raise ValueError(f"{ENV_ADAPTIVE_SUFFIX_CACHE}={raw[:40]!r}: expected a whole number of "
                         f"requests from 0 to 999999999 (unset: {default})")
    return int(raw)


def suffix_cache(max_cached: int = ADAPTIVE_PARAMS.suffix_max_cached_requests,
                 depth: int = ADAPTIVE_PARAMS.suffix_tree_depth) -> Any:
    """arctic_inference's suffix-tree cache, or None when the package is not installed.

    `max_cached` finished requests' responses stay in its global tree for later requests
    (0: each request drafts from its own prompt and output only)."""
    try:
        from arctic_inference.suffix_decoding import SuffixDecodingCache
    except ImportError:
        return None
    return SuffixDecodingCache(max_tree_depth=depth, max_cached_requests=max_cached)


class CandidateFinder:
    """Both sources, sized for a batch of `max_rows` rows and drafts of up to `k` tokens;
    `prompt_tokens` and `max_cached_tokens` (None: `params`' `suffix_prompt_tokens` and
    `suffix_max_cached_tokens`) bound the suffix trees."""

    def __init__(self, max_rows: int, k: int, max_model_len: int, *,
                 params: AdaptiveParams = ADAPTIVE_PARAMS, prompt_tokens: int | None = None,
                 max_cached_tokens: int | None = None) -> None:
        self.params = params
        self.k, self.max_model_len = k, max_model_len
        self.prompt_tokens = params.suffix_prompt_tokens if prompt_tokens is None else prompt_tokens
        self.max_cached_tokens = (params.suffix_max_cached_tokens if max_cached_tokens is None
                                  else max_cached_tokens)
        self._cached: dict[Any, int] = {}
        """Response tokens in the cross-request tree per request, oldest first (the order
        arctic_inference evicts by count in, too)."""
        self.cached_tokens = 0
        self._draft = np.zeros((max_rows, k), dtype=np.int32)
        self._lengths = np.zeros(max_rows, dtype=np.int32)
        self._bands = np.zeros(max_rows, dtype=np.int32)
        self._ngram = vllm_ngram_matcher()
        self.max_cached = cached_requests(os.environ, params.suffix_max_cached_requests)
        self.suffix = suffix_cache(self.max_cached, params.suffix_tree_depth)
        self.suffix_calls = 0
        self._warm_up()

    def find(self, rows: list[int], states: list[RowState | None], counts: np.ndarray,
             token_ids: np.ndarray, cycle: int, dormant: bool = False
             ) -> dict[int, dict[str, Candidate]]:
        """Each looked-at row's candidates by source (also stored on its state); the suffix tree
        only awake, and only for the rows the module docstring says."""
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
                    found[i]["ngram"] = Candidate(self._draft[i, :length].tolist(),
                                                  int(self._bands[i]),
                                                  state.evidence.last_full["ngram"])
        if self.suffix is not None and not dormant:
            every, short = self.params.suffix_sample_every, self.params.suffix_short
            for i in rows:
                state = states[i]
                assert state is not None
                sampled = (i + cycle) % every == 0
                if not sampled:
                    ngram = found[i].get("ngram")
                    if ngram is not None and len(ngram.tokens) >= short:
                        continue
                    if cycle < state.suffix_next:
                        continue
                draft = self._speculate(state, i, int(counts[i]), token_ids)
                if draft is None or not draft.token_ids:
                    self.suffix_scored(state, cycle, hit=False)
                else:
                    probs = list(draft.probs)
                    band = strength_band("suffix", sum(probs) / len(probs) if probs else None,
                                         self.params.strength_bands)
                    found[i]["suffix"] = Candidate(list(draft.token_ids), band,
                                                   state.evidence.last_full["suffix"])
        for i in rows:
            state = states[i]
            assert state is not None
            state.candidates = found[i]
            state.probed = True
        return found

    def suffix_scored(self, state: RowState, cycle: int, hit: bool) -> None:
        """A row's suffix query found nothing or missed its first token (`hit` False: ask it
        again after twice as many cycles, at most `suffix_sample_every`), or hit (ask again
        next cycle)."""
        cap = self.params.suffix_sample_every
        state.suffix_wait = 1 if hit else min(2 * state.suffix_wait, cap)
        state.suffix_next = cycle + state.suffix_wait

    def scored(self, state: RowState, new: Sequence[int], cycle: int) -> None:
        """Last cycle's suffix candidate of a row against the tokens that came: the backoff
        goes by its first token (`suffix_scored`)."""
        candidate = state.candidates.get("suffix")
        if candidate is not None:
            self.suffix_scored(state, cycle, hit=bool(new) and candidate.tokens[0] == new[0])

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
            self.suffix = suffix_cache(self.max_cached, self.params.suffix_tree_depth)
            self._cached.clear()
            self.cached_tokens = 0

    def _speculate(self, state: RowState, row: int, n: int, token_ids: np.ndarray) -> Any:
        """The suffix tree's draft for a row, after bringing its tree up to date."""
        assert self.suffix is not None
        self.suffix_calls += 1
        if state.suffix_synced < 0:
            first = max(0, state.prompt_len - self.prompt_tokens)
            prompt = np.ascontiguousarray(token_ids[row, first:state.prompt_len], dtype=np.int32)
            self._forget(state.uid)  # a reused id: arctic_inference drops its old response
            self.suffix.start_request(state.uid, prompt)
            if state.uid in self.suffix.cached_requests:
                self._cached[state.uid] = 0
            state.suffix_synced = state.prompt_len
        if n > state.suffix_synced:
            self.suffix.add_active_response(state.uid, np.ascontiguousarray(
                token_ids[row, state.suffix_synced:n], dtype=np.int32))
            if state.uid in self._cached:
                self._cached[state.uid] += n - state.suffix_synced
                self.cached_tokens += n - state.suffix_synced
            state.suffix_synced = n
            self._evict_over_bound()
        depth = self.params.suffix_tree_depth
        context = np.ascontiguousarray(token_ids[row, max(0, n - depth):n], dtype=np.int32)
        return self.suffix.speculate(state.uid, context, max_spec_tokens=self.k,
                                     min_token_prob=self.params.suffix_min_token_prob)

    def _forget(self, uid: Any) -> None:
        self.cached_tokens -= self._cached.pop(uid, 0)

    def _evict_over_bound(self) -> None:
        """Evict the oldest requests' responses while the cross-request tree holds more than
        `max_cached_tokens` tokens; those arctic_inference already evicted by count are only
        forgotten (they are the oldest too)."""
        assert self.suffix is not None
        cached = self.suffix.cached_requests
        while self._cached:
            oldest = next(iter(self._cached))
            if oldest in cached and self.cached_tokens <= self.max_cached_tokens:
                return
            self._forget(oldest)
            if oldest in cached:
                self.suffix.evict_cached_response(oldest)

    def _warm_up(self) -> None:
        """Compile the n-gram matcher now (a few seconds, once per worker), not on the first
        request, for the argument types of the engine's calls: vLLM's int32 token counts and
        token array (another dtype would compile a second specialisation mid-run)."""
        if self._ngram is None:
            return
        tokens = np.arange(32, dtype=np.int32).reshape(1, 32) % 4
        self._run_ngram([0], np.array([32], dtype=np.int32), tokens)

    def _run_ngram(self, rows: list[int], num_tokens: np.ndarray, token_ids: np.ndarray) -> None:
        p = self.params
        self._ngram(np.fromiter(rows, dtype=np.int64, count=len(rows)), num_tokens, token_ids,
                    p.ngram_min, p.ngram_long, p.ngram_max, self.max_model_len, self.k,
                    self._draft, self._lengths, self._bands)

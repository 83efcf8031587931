"""Which request a batch row holds: the proposer sees row indices; vLLM knows request ids.

Where the runner gives the batch's request ids by row (`engine/changes/worker_gpu_model_runner.py`
sets the proposer's `request_limits` before each call), a row continues a state exactly when its
request id had that state last cycle: a request vLLM moved to another row (the batch is
condensed when requests finish) is found by its id, a departed id's state is stopped, a new id
starts afresh.

Only where no id is given (no runner patch, or a row beyond the ids) is a row matched by its
tokens: the same request as last cycle when its first `key_tokens` tokens and its token count
continue from it (checked for the whole batch at once with numpy) and its accepted tokens are a
prefix of what was drafted for it; a moved request is found by the same key. That key is weak:
a chat template makes the first tokens equal for nearly every request, so a new request whose
prompt length equals a departed one's last count would inherit its state (its end, its
evidence, its suffix-tree entry). Ids are what the engine uses.

`RowTable` is that matching, one cycle at a time; `RowTracker` keeps it across cycles for the
proposer: it starts a request (a fresh `RowState`, its end from the runner's request states,
the counters) and hands a departed one to the proposer's `on_stop`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from itertools import count
from typing import cast

import numpy as np

from vllm_specdec_plugin.proposer.acceptance import RowEvidence
from vllm_specdec_plugin.proposer.params import ADAPTIVE_PARAMS, AdaptiveParams
from vllm_specdec_plugin.proposer.state import RequestLimits, RowState, request_end
from vllm_specdec_plugin.proposer.stats import ProposerStats

_KEY_TOKENS = ADAPTIVE_PARAMS.key_tokens


def continues(state: RowState, new: Sequence[int]) -> bool:
    """Whether `new` (accepted drafts + bonus) can follow what was drafted for the row."""
    accepted = len(new) - 1
    return accepted <= len(state.draft) and list(new[:accepted]) == state.draft[:accepted]


def masked_keys(token_ids: np.ndarray, rows: int, counts: np.ndarray,
                key_tokens: int = _KEY_TOKENS) -> np.ndarray:
    """Each row's first `key_tokens` tokens, with positions at or past `counts[i]` (or past
    the array's width) set to -1: the token array holds stale tokens there."""
    if token_ids.shape[1] >= key_tokens and (rows == 0 or counts[:rows].min() >= key_tokens):
        return np.array(token_ids[:rows, :key_tokens], dtype=np.int64)  # the common case
    keys = np.full((rows, key_tokens), -1, dtype=np.int64)
    width = min(key_tokens, token_ids.shape[1])
    keys[:, :width] = token_ids[:rows, :width]
    keys[np.arange(key_tokens)[None, :] >= counts[:rows, None]] = -1
    return keys


class RowTable:
    """Per-row states with the previous cycle's request ids, keys and token counts."""

    def __init__(self, max_rows: int, key_tokens: int = _KEY_TOKENS) -> None:
        self.key_tokens = key_tokens
        self._grow(max(max_rows, 1))
        self.by_id: dict[str, RowState | None] = {}
        """Last cycle's states by request id (the rows whose id the runner gave)."""

    def _grow(self, size: int) -> None:
        self.counts = np.full(size, -1, dtype=np.int64)
        self.keys = np.full((size, self.key_tokens), -2, dtype=np.int64)
        self.states: list[RowState | None] = [None] * size
        """Last cycle's states of the rows matched by tokens (None for the others)."""
        self.stored = 0
        """Rows stored by the last cycle (states beyond them are None)."""
        self.by_tokens = 0
        """States among `states` (matched by tokens) last cycle."""

    def match(self, sampled: Sequence[Sequence[int]], lens: np.ndarray, counts: np.ndarray,
              token_ids: np.ndarray, ids: Sequence[str | None] | None,
              start: Callable[[int, int], RowState], stop: Callable[[RowState], None]
              ) -> tuple[list[RowState | None], np.ndarray | None, bool]:
        """Each row's state (its request's state if it continues, else `start(row,
        prompt_len)`; None for a row that sampled nothing), the rows' keys (for `store`; None
        when every row has an id), and whether any row is new. States no row continues are
        given to `stop`. `ids`: the request id by row, where the runner gives them (see the
        module docstring)."""
        rows = len(sampled)
        before = counts - lens
        if rows > len(self.counts):
            self._grow(rows)
        states: list[RowState | None] = [None] * rows
        fresh = False
        named = 0 if ids is None else min(len(ids), rows)
        if ids is not None:
            left = dict(self.by_id)
            for i, req_id in zip(range(named), ids, strict=False):
                if req_id is None:
                    continue
                state = left.pop(req_id, None)
                if not sampled[i]:  # sampled nothing (a partial prefill): no state this cycle
                    if state is not None:
                        stop(state)
                elif state is None:
                    states[i] = start(i, int(before[i]))
                    fresh = True
                else:
                    states[i] = state
            for state in left.values():  # requests gone from the batch
                if state is not None:
                    stop(state)
        if self.by_tokens == 0 and all_named(ids, rows):
            return states, None, fresh  # the engine's case: no row goes by its tokens
        same, keys = self.continuing(rows, before, token_ids)
        mask = None  # rows matched by tokens: all of them when no id is given
        if ids is not None:
            mask = np.zeros(rows, dtype=bool)
            mask[named:] = True
            if None in ids[:named]:  # transient in vLLM's batch
                mask[:named] = [req_id is None for req_id in ids[:named]]
        if mask is None or self.by_tokens or mask.any():
            fresh |= self._match_tokens(sampled, lens, before, same, keys, mask, states,
                                        start, stop)
        return states, keys, fresh

    def _match_tokens(self, sampled: Sequence[Sequence[int]], lens: np.ndarray,
                      before: np.ndarray, same: np.ndarray, keys: np.ndarray,
                      mask: np.ndarray | None, states: list[RowState | None],
                      start: Callable[[int, int], RowState], stop: Callable[[RowState], None]
                      ) -> bool:
        """`match` for the rows in `mask` (None: all), those without a request id, against last
        cycle's states that had none: in place when the key and count continue, else by key
        among the displaced."""
        rows = len(sampled)
        previous = self.states
        same = same & (lens > 0)
        if mask is not None:
            same &= mask
        kept = np.zeros(rows, dtype=bool)
        for i in np.flatnonzero(same).tolist():
            state = previous[i]
            if state is not None and (not state.draft or continues(state, sampled[i])):
                states[i] = state
                kept[i] = True
        fresh = False
        missing = ~kept if mask is None else mask & ~kept
        if missing.any() or int(kept.sum()) < self.by_tokens:
            displaced = self.displaced(rows, kept)
            for i in np.flatnonzero(missing).tolist():
                if not lens[i]:
                    continue  # a partial prefill: nothing to draft or learn yet
                old = displaced.get((keys[i].tobytes(), int(before[i])))
                state = previous[old.pop(old.index(i) if i in old else 0)] if old else None
                if state is not None and state.draft and not continues(state, sampled[i]):
                    stop(state)
                    state = None
                if state is None:
                    state = start(i, int(before[i]))
                    fresh = True
                states[i] = state
            for leftovers in displaced.values():  # requests gone from the batch
                for j in leftovers:
                    old_state = previous[j]
                    if old_state is not None:
                        stop(old_state)
        return fresh

    def continuing(self, rows: int, before: np.ndarray, token_ids: np.ndarray
                   ) -> tuple[np.ndarray, np.ndarray]:
        """(rows whose key and count before this cycle's tokens equal last cycle's, those keys:
        a moved request is looked up in `displaced` by the same key)."""
        if rows > len(self.counts):
            self._grow(rows)
        keys = masked_keys(token_ids, rows, before, self.key_tokens)
        same = (before[:rows] == self.counts[:rows]) & (keys == self.keys[:rows]).all(axis=1)
        return np.asarray(same, dtype=bool), keys

    def displaced(self, rows: int, kept: np.ndarray) -> dict[tuple[bytes, int], list[int]]:
        """Last cycle's rows whose state no row kept in place: (key, count) -> old rows."""
        out: dict[tuple[bytes, int], list[int]] = {}
        for j in range(self.stored):
            state = self.states[j]
            if state is None or (j < rows and kept[j]):
                continue
            out.setdefault((self.keys[j].tobytes(), int(self.counts[j])), []).append(j)
        return out

    def store(self, states: Sequence[RowState | None], counts: np.ndarray,
              token_ids: np.ndarray, keys: np.ndarray | None = None,
              ids: Sequence[str | None] | None = None) -> None:
        """This cycle's states, by request id where `ids` gives one (copied: the runner's
        list changes), else keyed by the tokens they hold now. `keys`: the keys `continuing`
        returned this cycle; they still hold when every row had `key_tokens` tokens before this
        cycle's (later tokens do not change a key)."""
        rows = len(states)
        if rows > len(self.counts):
            self._grow(rows)
        self.counts[:] = -1
        if ids is not None and all_named(ids, rows):  # the engine's case: no row by tokens
            self.by_id = dict(zip(cast("Sequence[str]", ids), states, strict=False))
            self.states = [None] * len(self.counts)
            self.stored = self.by_tokens = 0
            return
        self.counts[:rows] = counts[:rows]
        if keys is None or len(keys) != rows or (rows and keys.min() < 0):
            keys = masked_keys(token_ids, rows, counts, self.key_tokens)
        self.keys[:rows] = keys
        by_tokens = list(states)
        self.by_id = {}
        if ids is not None:  # rows beyond the ids, or without one (transient in vLLM's batch)
            self.by_id = {r: s for r, s in zip(ids, states, strict=False) if r is not None}
            by_tokens = [s if i >= len(ids) or ids[i] is None else None
                         for i, s in enumerate(states)]
        self.states = by_tokens + [None] * (len(self.counts) - rows)
        self.stored = rows
        self.by_tokens = rows - by_tokens.count(None)


def all_named(ids: Sequence[str | None] | None, rows: int) -> bool:
    """Whether `ids` gives every one of `rows` rows a request id."""
    return ids is not None and len(ids) >= rows and None not in ids[:rows]


class RowTracker:
    """The batch's requests across cycles, for the proposer: `RowTable` matching, a request's
    start (a fresh `RowState` with its end, counted in `stats`) and its stop (`on_stop`, the
    proposer's: its shadows closed, its suffix tree ended)."""

    def __init__(self, max_rows: int, stats: ProposerStats, on_stop: Callable[[RowState], None],
                 params: AdaptiveParams = ADAPTIVE_PARAMS) -> None:
        self.params, self.stats, self.on_stop = params, stats, on_stop
        self.table = RowTable(max_rows, params.key_tokens)
        self.request_cycles: list[int] = []
        """The cycle at which each of the first requests started (for the statistics)."""
        self._uids = count()
        self._limits: RequestLimits | None = None
        self._cycle = 0

    def match(self, sampled: Sequence[Sequence[int]], lens: np.ndarray, counts: np.ndarray,
              token_ids: np.ndarray, limits: RequestLimits | None, cycle: int
              ) -> tuple[list[RowState | None], np.ndarray | None, bool]:
        """`RowTable.match` of cycle `cycle`, by the request ids in `limits` where given (the
        proposer's `request_limits`, which `store` uses too)."""
        self._limits, self._cycle = limits, cycle
        return self.table.match(sampled, lens, counts, token_ids, self._ids(), self._start,
                                self._stop)

    def store(self, states: Sequence[RowState | None], counts: np.ndarray,
              token_ids: np.ndarray, keys: np.ndarray | None) -> None:
        """This cycle's states (`RowTable.store`), by the ids `match` was given."""
        self.table.store(states, counts, token_ids, keys, self._ids())

    def reset(self) -> None:
        """Forget every row (after an internal error): all requests start afresh."""
        self.table = RowTable(len(self.table.counts), self.params.key_tokens)

    def _ids(self) -> Sequence[str | None] | None:
        """vLLM's request id by batch row, when the runner gave them."""
        return None if self._limits is None else self._limits[0]

    def _start(self, row: int, prompt_len: int) -> RowState:
        self.stats.requests += 1
        if len(self.request_cycles) < self.params.max_request_cycles:
            self.request_cycles.append(self._cycle)
        state = RowState(uid=next(self._uids), prompt_len=prompt_len,
                         evidence=RowEvidence(self.params))
        end = request_end(self._limits, row)
        if end is not None:
            state.end = end
            self.stats.limited_requests += 1
        return state

    def _stop(self, state: RowState) -> None:
        self.on_stop(state)

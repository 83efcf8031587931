"""Which request a batch row holds: the proposer sees row indices, not request ids.

A row holds the same request as last cycle when its first `KEY_TOKENS` tokens and its token
count continue from it (checked for the whole batch at once with numpy) and its accepted tokens
are a prefix of what was drafted for it; a request that vLLM moved to another row (the batch is
condensed when requests finish) is found by the same key; anything else is a new request with a
fresh history.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from vllm_specdec_plugin.proposer.acceptance import RowEvidence

KEY_TOKENS = 8


@dataclass
class Candidate:
    """One source's candidate for a row this cycle, scored against what comes next cycle."""

    tokens: list[int]
    band: int
    """Strength band (`acceptance.strength_band`)."""
    full: bool
    """The row's previous candidate of this source matched in full (a feature)."""
    drafted: int = 0
    predicted: float = 0.0
    """Expected accepted tokens of the drafted prefix (uncalibrated), when drafted."""
    calibrated: float = 0.0
    """The same, calibrated: what the plan counted on."""
    matched: int = 0
    """Positions that matched the row's tokens so far (a shadow followed over cycles)."""
    expected: float = 0.0
    """What the pooled rates expected of its positions scored so far."""


@dataclass
class RowState:
    """What the proposer remembers about the request in one batch row."""

    uid: int
    prompt_len: int
    end: int = 1 << 62
    """The token count at which the request stops (prompt + max_tokens), when known."""
    evidence: RowEvidence = field(default_factory=RowEvidence)
    candidates: dict[str, Candidate] = field(default_factory=dict)
    shadows: dict[str, Candidate] = field(default_factory=dict)
    """Per source, the undrafted candidate being followed until it misses or ends
    (`policy.follow`)."""
    draft: list[int] = field(default_factory=list)
    """What was actually proposed for this row last cycle."""
    suffix_synced: int = -1
    """Tokens given to the suffix tree so far (-1: the request is not started there)."""
    suffix_wait: int = 1
    suffix_next: int = 0
    """The suffix tree is asked again for this row no earlier than this cycle (a backoff of
    `suffix_wait` cycles: `CandidateFinder.suffix_scored`)."""
    probed: bool = False
    """Candidates were looked for at least once (a new request is probed even when dormant)."""


def continues(state: RowState, new: Sequence[int]) -> bool:
    """Whether `new` (accepted drafts + bonus) can follow what was drafted for the row."""
    accepted = len(new) - 1
    return accepted <= len(state.draft) and list(new[:accepted]) == state.draft[:accepted]


def masked_keys(token_ids: np.ndarray, rows: int, counts: np.ndarray) -> np.ndarray:
    """Each row's first KEY_TOKENS tokens, with positions at or past `counts[i]` (or past the
    array's width) set to -1: the token array holds stale tokens there."""
    if token_ids.shape[1] >= KEY_TOKENS and (rows == 0 or counts[:rows].min() >= KEY_TOKENS):
        return np.array(token_ids[:rows, :KEY_TOKENS], dtype=np.int64)  # the common case
    keys = np.full((rows, KEY_TOKENS), -1, dtype=np.int64)
    width = min(KEY_TOKENS, token_ids.shape[1])
    keys[:, :width] = token_ids[:rows, :width]
    keys[np.arange(KEY_TOKENS)[None, :] >= counts[:rows, None]] = -1
    return keys


class RowTable:
    """Per-row states with the previous cycle's keys and token counts."""

    def __init__(self, max_rows: int) -> None:
        self._grow(max(max_rows, 1))

    def _grow(self, size: int) -> None:
        self.counts = np.full(size, -1, dtype=np.int64)
        self.keys = np.full((size, KEY_TOKENS), -2, dtype=np.int64)
        self.states: list[RowState | None] = [None] * size
        self.stored = 0
        """Rows stored by the last cycle (states beyond them are None)."""

    def continuing(self, rows: int, before: np.ndarray, token_ids: np.ndarray
                   ) -> tuple[np.ndarray, np.ndarray]:
        """(rows whose key and count before this cycle's tokens equal last cycle's, those keys:
        a moved request is looked up in `displaced` by the same key)."""
        if rows > len(self.counts):
            self._grow(rows)
        keys = masked_keys(token_ids, rows, before)
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

    def store(self, states: list[RowState | None], counts: np.ndarray,
              token_ids: np.ndarray, keys: np.ndarray | None = None) -> None:
        """This cycle's states, keyed by the tokens they hold now. `keys`: the keys
        `continuing` returned this cycle; they still hold when every row had KEY_TOKENS tokens
        before this cycle's (later tokens do not change a key)."""
        rows = len(states)
        if rows > len(self.counts):
            self._grow(rows)
        self.counts[:] = -1
        self.counts[:rows] = counts[:rows]
        if keys is None or len(keys) != rows or (rows and keys.min() < 0):
            keys = masked_keys(token_ids, rows, counts)
        self.keys[:rows] = keys
        self.states = states + [None] * (len(self.counts) - rows)
        self.stored = rows

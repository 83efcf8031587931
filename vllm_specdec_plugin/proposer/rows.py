"""Which request a batch row holds: the proposer sees row indices, not request ids.

A row is the same request as last step when its first tokens and its token count continue from
the previous step and its accepted tokens are a prefix of what was drafted for it; anything else
is a new request with a fresh history.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from vllm_specdec_plugin.proposer.policy import Acceptance

SOURCES = ("ngram", "suffix")
# A row is recognised by its first tokens and its length.
KEY_TOKENS = 8


@dataclass
class RowState:
    """What the proposer remembers about the request in one batch row."""

    uid: int
    row: int
    tokens: int
    """num_tokens_no_spec after the last call."""
    key: bytes
    acceptance: dict[str, Acceptance] = field(
        default_factory=lambda: {source: Acceptance() for source in SOURCES})
    candidates: dict[str, list[int]] = field(default_factory=dict)
    """Last step's candidate per source (scored against what came, drafted or not)."""
    draft: list[int] = field(default_factory=list)
    """What was actually proposed for this row last step."""


def claim(previous: dict[tuple[bytes, int], list[RowState]], key: bytes, tokens: int,
               row: int) -> RowState | None:
        """Take the state stored under (key, tokens), preferring the one that was in `row`."""
        candidates = previous.get((key, tokens))
        if not candidates:
            return None
        for index, state in enumerate(candidates):
            if state.row == row:
                return candidates.pop(index)
        return candidates.pop(0)

def continues(state: RowState, new: Sequence[int]) -> bool:
        """Whether `new` (accepted drafts + bonus) can follow what was drafted for the row."""
        accepted = len(new) - 1
        return accepted <= len(state.draft) and list(new[:accepted]) == state.draft[:accepted]

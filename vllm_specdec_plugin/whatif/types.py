"""The typed values the whatif stages hand each other: tokenized requests in, replay counts out."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

METHODS = ("ngram", "suffix", "adaptive")
"""The methods `whatif` replays exactly: the draft-free ones (no draft model to run)."""


@dataclass(frozen=True, eq=False)
class ReplayRequest:
    """One request as the engine would see it: the prompt's token ids (after the chat template)
    and the completion's, as int32 arrays (the dtype vLLM's token buffer has)."""

    prompt_ids: np.ndarray
    completion_ids: np.ndarray
    line: int
    """Where it came from: the traffic file's line (JSONL) or conversation number (ShareGPT)."""
    continuation: np.ndarray | None = None
    """The model's own tokens after the completion, where known (a benchmark that generated
    further; never a log): a draft position past the completion's end is then judged against
    them, as the engine judges it, instead of counted as rejected. Not emitted."""


@dataclass(frozen=True)
class MethodConfig:
    """One configuration to replay, as the operator would write it in `speculative_config`."""

    method: str
    """"ngram", "suffix" or "adaptive" (`METHODS`)."""
    k: int
    """num_speculative_tokens."""
    prompt_lookup_min: int | None = None
    """ngram only; None = as vLLM resolves it (min defaults to max, both 5 when neither)."""
    prompt_lookup_max: int | None = None
    """ngram only; None = as vLLM resolves it."""


@dataclass(frozen=True, eq=False)
class ReplayResult:
    """What one configuration did on the traffic, per request (arrays in traffic order).

    A request of n completion tokens takes one prefill step (its first token) and then `steps`
    verify steps; each verify step emits 1 + its accepted draft tokens, so without speculation it
    takes n - 1 steps. The counters are the ones vLLM's spec-decode metrics count for the same
    requests served one at a time: `drafting_steps` = `num_drafts`, `drafted` =
    `num_draft_tokens`, `accepted` = `num_accepted_tokens`, `accepted_by_position` =
    `num_accepted_tokens_per_pos`."""

    config: MethodConfig
    resolved: dict[str, Any]
    """The speculative config as vLLM resolved it (e.g. ngram's prompt_lookup_min filled in)."""
    output_tokens: np.ndarray
    steps: np.ndarray
    drafting_steps: np.ndarray
    drafted: np.ndarray
    accepted: np.ndarray
    accepted_by_position: np.ndarray
    """Length k: accepted draft tokens at position 0, 1, ... summed over all steps."""
    seconds: float = 0.0
    """Wall time of the replay."""
    past_end_open: int = 0
    """Draft tokens past a completion's end, in steps whose draft matched up to the end and
    that no continuation judged: the engine may have accepted them (it verifies drafts past
    max_tokens and counts their acceptance), so its accepted count can exceed `accepted` by
    at most this many."""
    notes: tuple[str, ...] = field(default_factory=tuple)
    drafter: str = ""
    """The drafter replayed, as the target host runs it (`drafter.host_drafter`): "v1-ngram",
    "mrv2-ngram-gpu", "v1-suffix", "v1-adaptive"; "" where the caller named none."""
    drafter_why: str = ""
    """Why the target host runs that drafter (one line)."""

    @property
    def requests(self) -> int:
        return int(len(self.output_tokens))

    @property
    def total_steps(self) -> int:
        return int(self.steps.sum())

    @property
    def tokens_per_step(self) -> float:
        """Mean tokens one verify step emits (1.0 = speculation bought nothing)."""
        steps = int(self.steps.sum())
        return float((self.output_tokens - 1).clip(min=0).sum() / steps) if steps else 1.0

    @property
    def drafting_share(self) -> float:
        """The share of verify steps that verified at least one drafted token."""
        steps = int(self.steps.sum())
        return float(self.drafting_steps.sum() / steps) if steps else 0.0

"""What the adaptive proposer remembers: per request, its row's state and its candidates.

Plain data, no logic beyond reading the runner's request states (`request_end`): `rows.py`
decides which request a batch row holds, `candidates.py` fills `RowState.candidates`,
`learning.py` scores them, and `proposer.py` is the class vLLM builds over these objects.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from vllm_specdec_plugin.proposer.acceptance import RowEvidence


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


RequestLimits = tuple[Sequence[str | None], Mapping[str, Any]]
"""Set by the runner (`engine/changes/worker_gpu_model_runner.py`): (the input batch's request id by
row, the runner's request states by id), references to the runner's own, valid during one
call."""


def request_end(limits: RequestLimits | None, row: int) -> int | None:
    """The token count at which the request in `row` stops (prompt + max_tokens), from the
    runner's request states, or None where they are not given."""
    if limits is None:
        return None
    req_ids, requests = limits
    if row >= len(req_ids):
        return None
    req_id = req_ids[row]
    request = None if req_id is None else requests.get(req_id)
    params = getattr(request, "sampling_params", None)
    max_tokens = getattr(params, "max_tokens", None)
    prompt = getattr(request, "num_prompt_tokens", None)
    if not isinstance(max_tokens, int) or not isinstance(prompt, int):
        return None
    return prompt + max_tokens

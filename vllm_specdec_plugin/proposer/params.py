"""The adaptive proposer's tunables: one frozen dataclass, one docstring a field.

vLLM keeps its suffix decoding's knobs as `suffix_decoding_*` fields of `SpeculativeConfig`; the
proposer keeps its own here. Every module of `proposer/` reads them from the `AdaptiveParams`
it is given, `ADAPTIVE_PARAMS` unless a caller says otherwise (`AdaptiveProposer.params`: a
subclass, or a test, may set other values). Environment variables that tune the proposer stay
where they are read (`VLLM_SPECDEC_ADAPTIVE_SUFFIX_CACHE` in `candidates.py`, its default the
field `suffix_max_cached_requests`). The step-cost table's own tunables are `StepCostParams` of
`core/step_cost.py`, the field `step_cost` here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from vllm_specdec_plugin.core.step_cost import STEP_COST_DEFAULTS, StepCostParams


@dataclass(frozen=True)
class AdaptiveParams:
    """The adaptive proposer's tunables, grouped by the module that reads them."""

    # -- acceptance.py: pooled rates, the row's factor, calibration ----------------------------
    position_starts: tuple[int, ...] = (1, 2, 3, 5, 9)
    """Draft positions (1-based) that start each position bucket: 1, 2, 3-4, 5-8, 9+."""
    strength_bands: tuple[float, ...] = (0.5, 0.8)
    """A suffix candidate's strength bands by mean token probability: < 0.5, < 0.8, >= 0.8."""
    prior_rate: tuple[float, ...] = (0.3, 0.6, 0.7, 0.75, 0.8)
    """Acceptance per position bucket before any evidence (one per `position_starts`)."""
    prior_trials: float = 4.0
    """Pseudo-trials at `prior_rate` in each bucket's posterior mean."""
    pooled_decay: float = 0.998
    """Decay of a feature key's pooled counts per observation of that key."""
    row_decay: float = 0.85
    """Decay of a row's own evidence per scored candidate of the row."""
    row_shrink: float = 2.0
    """Pseudo-trials that shrink a row's realised-over-expected ratio towards 1."""
    max_rate: float = 0.995
    """Cap on a token's acceptance chance after the row's factor (never certain)."""
    calibration_decay: float = 0.99
    """Decay of a source's predicted and realised accepted tokens per sent draft."""
    calibration_prior: float = 4.0
    """Predicted tokens' worth of "calibrated" before any draft was sent."""
    calibration_range: tuple[float, float] = (0.2, 1.25)
    """Bounds on a source's calibration factor."""

    # -- candidates.py: vLLM's n-gram matcher and the suffix tree -------------------------------
    ngram_min: int = 3
    """Shortest n-gram vLLM's matcher matches (KAITO's static config uses 4)."""
    ngram_long: int = 4
    """An n-gram match of this many tokens or more is the stronger band (pooled apart)."""
    ngram_max: int = 5
    """Longest n-gram vLLM's matcher matches."""
    suffix_tree_depth: int = 24
    """arctic_inference's `max_tree_depth`, and the context a suffix query is given."""
    suffix_max_cached_requests: int = 10000
    """Finished requests the cross-request suffix tree keeps, when
    `VLLM_SPECDEC_ADAPTIVE_SUFFIX_CACHE` is unset."""
    suffix_prompt_tokens: int = 2048
    """A request's own suffix tree gets at most this many prompt tokens, the prompt's last: its
    build and free (~0.8 µs a token, on the worker's critical path, once per request) stay under
    ~1.6 ms a request; prompts up to this long are given whole."""
    suffix_max_cached_tokens: int = 1_000_000
    """The cross-request tree holds at most this many response tokens in all (oldest requests
    evicted first): ~260-300 bytes a token measured with arctic_inference 0.3.0 at depth 24
    (random tokens; text shares more), so ~0.3 GB a worker at most, where the request count
    alone bounds nothing (10,000 requests of 8,000 tokens each: ~22 GB)."""
    suffix_min_token_prob: float = 0.1
    """arctic_inference's `min_token_prob` for a suffix query."""
    suffix_short: int = 4
    """The suffix tree is asked where the n-gram candidate is missing or shorter than this."""
    suffix_sample_every: int = 8
    """A rotating 1/this of the rows is asked regardless, and the cap (in cycles) of a row's
    suffix backoff."""

    # -- control.py: the margin and dormancy ----------------------------------------------------
    margin_start: float = 0.05
    """The plan's required margin over drafting nothing, at start."""
    margin_range: tuple[float, float] = (0.02, 0.5)
    """Bounds on the margin."""
    margin_up: float = 0.03
    """Margin added per drafting cycle while drafting loses (mean log speedup below 0)."""
    margin_down: float = 0.01
    """Margin taken off per drafting cycle while drafting pays by more than `pays`."""
    pays: float = math.log(1.03)
    """Mean log speedup above which drafting pays (a 3% gain)."""
    speedup_weight: float = 0.2
    """Moving-average weight of one drafting cycle's log speedup."""
    dormant_after: int = 32
    """Awake cycles in a row that draft nothing before the proposer goes dormant."""
    probe_every: int = 8
    """A dormant proposer looks at a rotating 1/this of the rows each cycle."""
    wake_every: int = 256
    """A dormant proposer wakes (margin halved) at the latest after this many cycles."""
    max_events: int = 64
    """Dormant/awake events kept for the statistics file."""

    # -- proposer.py, rows.py, trace.py: the cycle, the rows, the files ------------------------
    default_num_speculative_tokens: int = 8
    """k when the speculative config gives no `num_speculative_tokens`."""
    idle_factor: float = 4.0
    """A gap between calls longer than this many predicted cycles is idle time, not a cycle."""
    key_tokens: int = 8
    """First tokens that key a row matched by its tokens (no request id given)."""
    max_request_cycles: int = 64
    """Requests whose starting cycle the statistics file records."""
    stats_every: int = 25
    """The statistics file is written every this many calls (and when a request came)."""
    stats_idle_s: float = 0.5
    """The statistics file is written again this long after the last call (the run's tail)."""
    max_trace_records: int = 200_000
    """Lines the trace file gets at most."""

    step_cost: StepCostParams = STEP_COST_DEFAULTS
    """The step-cost table's tunables (`core/step_cost.py`)."""


ADAPTIVE_PARAMS = AdaptiveParams()
"""The defaults: what the proposer vLLM builds runs with."""

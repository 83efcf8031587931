"""`vllm-specdec status`'s figures: counters in, the `Status` (figures and a verdict) out.

Pure. The counters and the acceptance formulas are `inputs/vllm_metrics.py`'s; here they are
rounded for the report, differenced into `--watch` windows and judged.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, replace
from typing import Any

from vllm_specdec_plugin.core.request_tokens import SPECULATION_LABELS
from vllm_specdec_plugin.core.step_cost import STEP_COST_DEFAULTS
from vllm_specdec_plugin.core.types import METHOD_NONE, SOURCE_PREFILL_ONLY
from vllm_specdec_plugin.inputs.vllm_metrics import (
    STEP_COSTS_FORMAT,
    Counters,
    acceptance_rate,
    finite,
    mean_acceptance_length,
    per_position_acceptance,
)

# Below this acceptance rate most draft tokens are verified for nothing; the README's
# measurements put break-even near 0.2 at batch 4 and 0.45 at batch 16. Shared with the alert.
LOW_ACCEPTANCE = 0.2
LOAD_SENSITIVE_ACCEPTANCE = 0.45


@dataclass(frozen=True)
class Status:
    """What `vllm-specdec status` reports (the --json keys, in order)."""

    decision: Mapping[str, str] | None
    drafts: int | None
    draft_tokens: int | None
    accepted_tokens: int | None
    acceptance_rate: float | None
    mean_acceptance_length: float | None
    per_position: list[float] | None
    verdict: str
    window_s: float | None = None
    """--watch only: the window the figures cover."""
    output_tokens_per_s: float | None = None
    """--watch only: output tokens per second over the window."""
    schedule: list[dict[str, Any]] | None = None
    """The schedule controller's buckets (None: no controller gauges in /metrics): each
    {"batch_bucket", "k" (in force), "gains": {k: {"ratio", "low", "high", "pairs"}}}."""
    step_costs: dict[str, Any] | None = None
    """The controller's learned step costs (None: none in /metrics), `step_costs_of`'s form."""
    requests: dict[str, int] | None = None
    """Requests admitted by how they speculate ({"on", "off", "capped"}: counts;
    `vllm_xargs.num_speculative_tokens`), None where the server exports no such counter."""

    def to_json(self, indent: int | None = 2) -> str:
        data = asdict(self)
        if self.window_s is None:
            del data["window_s"], data["output_tokens_per_s"]
        for key in ("schedule", "step_costs", "requests"):
            if data[key] is None:
                del data[key]
        return json.dumps(data, indent=indent)


def schedule_of(counters: Counters) -> list[dict[str, Any]] | None:
    """The controller's buckets as plain data (the gauges are gauges: not windowed)."""
    if not counters.schedule:
        return None
    return [{"batch_bucket": label, "k": k,
             "gains": {str(kk): {"ratio": round(g.ratio, 4),
                                 "low": None if g.low is None else round(g.low, 4),
                                 "high": None if g.high is None else round(g.high, 4),
                                 "pairs": g.pairs} for kk, g in gains}}
            for label, k, gains in counters.schedule]


def step_costs_of(counters: Counters) -> dict[str, Any] | None:
    """The learned step costs as `status --json` writes them (None: no step-cost gauges), the
    format `vllm-specdec whatif --costs` reads:

        {"format": "vllm-specdec-step-costs/v1",
         "fixed_tokens": 16.0,
         "buckets": {"1-1": {"rows": 1.0, "no_draft_s": 0.0152, "switch_s": 0.0006,
                             "per_token_s": 0.0008},
                     "4-7": {...}, ...}}

    `buckets` is keyed by batch-size bucket (`core/step_cost.bucket_label`: "1-1", "2-3",
    "4-7", ...). In one bucket a decode step of `rows` requests that verifies `d` drafted tokens
    (all requests together) takes `no_draft_s * (F + rows') / (F + rows)` seconds at `rows'`
    requests, plus `switch_s + per_token_s * d` when it verifies any draft, F = `fixed_tokens`
    (`StepCostParams.prior_fixed_tokens`, the controller's; `core/step_cost.BucketCost`).
    Seconds and rows are the engine's gauges as they are (not rounded)."""
    if not counters.step_costs:
        return None
    return {"format": STEP_COSTS_FORMAT, "fixed_tokens": STEP_COST_DEFAULTS.prior_fixed_tokens,
            "buckets": {label: {"rows": cost.rows, "no_draft_s": cost.no_draft_s,
                                "switch_s": cost.switch_s, "per_token_s": cost.per_token_s}
                        for label, cost in counters.step_costs}}


def status_of(counters: Counters, window_s: float | None = None) -> Status:
    """Figures and verdict for cumulative counters, or for a window of `window_s` seconds."""
    requests: dict[str, int] | None = None
    if counters.requests:
        requests = {label: round(count) for label, count in zip(
            SPECULATION_LABELS, counters.requests, strict=True)}
    return replace(_status_of(counters, window_s), schedule=schedule_of(counters),
                   step_costs=step_costs_of(counters), requests=requests)


def _status_of(counters: Counters, window_s: float | None) -> Status:
    rate_out = finite(counters.generation_tokens / window_s) if window_s else None
    if not counters.speculation:
        return Status(counters.decision, None, None, None, None, None, None,
                      _verdict_without_speculation(counters), window_s, rate_out)
    rate = acceptance_rate(counters.accepted_tokens, counters.draft_tokens)
    length = mean_acceptance_length(counters.accepted_tokens, counters.drafts)
    return Status(
        decision=counters.decision,
        drafts=round(counters.drafts),
        draft_tokens=round(counters.draft_tokens),
        accepted_tokens=round(counters.accepted_tokens),
        acceptance_rate=None if rate is None else round(rate, 4),
        mean_acceptance_length=None if length is None else round(length, 3),
        per_position=[round(p, 4) for p in per_position_acceptance(counters.per_position,
                                                                   counters.drafts)],
        verdict=verdict(rate, length, window_s),
        window_s=window_s,
        output_tokens_per_s=None if rate_out is None else round(rate_out, 2),
    )


def _verdict_without_speculation(counters: Counters) -> str:
    decision = counters.decision
    if decision is not None and decision.get("source") == SOURCE_PREFILL_ONLY:
        return ("prefill-only instance (disaggregated serving): no speculation here by design; "
                "check the decode instances")
    if decision is not None and decision.get("method") == METHOD_NONE:
        return (f"opted in, but serving WITHOUT speculative decoding "
                f"(source: {decision.get('source', '?')}); see the server's log")
    if not counters.engine_stats:
        return ("no engine statistics in /metrics (started with --disable-log-stats?); "
                "nothing to judge")
    return "no speculative decoding on this server (no vllm:spec_decode_* counters)"


def verdict(rate: float | None, length: float | None, window_s: float | None = None) -> str:
    """One line: does speculation pay, judged by its acceptance."""
    if rate is None or length is None:
        when = f"in the last {window_s:g} s" if window_s else "yet"
        return (f"speculation on, no drafts {when} (no traffic, or the load-aware schedule "
                "drafts nothing at this batch size)")
    if rate < LOW_ACCEPTANCE:
        return (f"acceptance {rate:.2f}: consider turning it off (most draft tokens are "
                "verified for nothing)")
    pays = f"speculation pays: {length:.1f} tokens per step (acceptance {rate:.2f})"
    if rate < LOAD_SENSITIVE_ACCEPTANCE:
        return pays + "; at high load it may not"
    return pays


def window(new: Counters, old: Counters) -> Counters:
    """The counters' increase from `old` to `new`; a restarted server counts from zero."""
    pairs = [(new.drafts, old.drafts), (new.draft_tokens, old.draft_tokens),
             (new.accepted_tokens, old.accepted_tokens),
             (new.generation_tokens, old.generation_tokens)]
    if any(now < before for now, before in pairs) or len(new.per_position) < len(old.per_position):
        return new  # a counter went down: the server restarted, everything counts from zero
    old_positions = old.per_position + (0.0,) * (len(new.per_position) - len(old.per_position))
    return replace(
        new,
        drafts=new.drafts - old.drafts,
        draft_tokens=new.draft_tokens - old.draft_tokens,
        accepted_tokens=new.accepted_tokens - old.accepted_tokens,
        per_position=tuple(a - b for a, b in zip(new.per_position, old_positions, strict=True)),
        generation_tokens=new.generation_tokens - old.generation_tokens,
        requests=tuple(max(a - b, 0.0) for a, b in zip(new.requests, old.requests,
                                                      strict=True))
        if len(new.requests) == len(old.requests) else new.requests,
    )


def iter_windows(scrapes: Iterator[tuple[float, Counters]]) -> Iterator[Status]:
    """--watch: one Status per consecutive pair of (time, counters) scrapes."""
    previous = next(scrapes, None)
    for current in scrapes:
        if previous is not None:
            span = current[0] - previous[0]
            yield status_of(window(current[1], previous[1]), window_s=span)
        previous = current

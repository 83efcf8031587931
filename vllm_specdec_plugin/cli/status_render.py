"""`vllm-specdec status`'s human-readable report (the JSON is `Status.to_json`)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from vllm_specdec_plugin.cli.status_figures import Status
from vllm_specdec_plugin.core.limits import printable
from vllm_specdec_plugin.core.types import METHOD_NONE


def render_text(status: Status) -> str:
    """The human-readable report."""
    rows = [("decision", describe_decision(status.decision))]
    if status.window_s is not None:
        out = status.output_tokens_per_s
        rows.append(("window", f"last {status.window_s:.1f} s"
                     + ("" if out is None else f", {out:.1f} output tokens/s")))
    if status.drafts is not None:
        rows += [
            ("drafts", str(status.drafts)),
            ("draft tokens", str(status.draft_tokens)),
            ("accepted tokens", str(status.accepted_tokens)),
            ("acceptance rate", _number(status.acceptance_rate, "{:.1%}")),
            ("mean acceptance length", _number(status.mean_acceptance_length,
                                               "{:.2f} tokens per step")),
            ("per-position acceptance", " ".join(f"{p:.2f}" for p in status.per_position or [])
             or "-"),
        ]
    if status.requests:
        rows.append(("requests", requests_line(status.requests)))
    rows += [("schedule", line) for line in schedule_lines(status.schedule or [])]
    if status.step_costs:
        rows.append(("step costs", step_costs_line(status.step_costs)))
    rows.append(("verdict", status.verdict))
    width = max(len(name) for name, _ in rows) + 1
    # Label values come from the server: control characters (ESC sequences) are escaped.
    return "\n".join(f"{name + ':':<{width}} {printable(value)}" for name, value in rows)


def describe_decision(decision: Mapping[str, str] | None) -> str:
    if decision is None:
        return "not exported (not opted in, or the plugin is not installed in the server)"
    method = decision.get("method", "?")
    tokens = decision.get("num_speculative_tokens")
    head = method if method == METHOD_NONE else f"{method} k={tokens}"
    details = [f"source {decision.get('source', '?')}"]
    details += [f"{key} {decision[key]}" for key in ("preset", "platform", "schedule")
                if decision.get(key)]
    return f"{head} ({', '.join(details)})"


def requests_line(requests: Mapping[str, int]) -> str:
    """"40 (on 75%, off 20%, capped 5%: vllm_xargs.num_speculative_tokens)"."""
    total = sum(requests.values())
    if not total:
        return "0"
    shares = ", ".join(f"{label} {count / total:.0%}" for label, count in requests.items())
    return f"{total} ({shares}: vllm_xargs.num_speculative_tokens)"


def _number(value: float | None, pattern: str) -> str:
    return "-" if value is None or math.isnan(value) else pattern.format(value)


def schedule_lines(buckets: list[dict[str, Any]]) -> list[str]:
    """One line per batch bucket: the k in force and what it measured against k=0, e.g.
    "batch 1-1: k=5, +38% [31, 44] against k=0 (12 pairs)" or "batch 16-31: k=0; k=2 would
    cost 4% [2, 6] (9 pairs)"."""
    lines = []
    for cell in buckets:
        k, gains = cell["k"], cell["gains"]
        head = f"batch {cell['batch_bucket']}: k={k}"
        if k != 0:
            gain = gains.get(str(k))
            lines.append(head + (f", {_change(gain)} against k=0" if gain
                                 else " (not measured against k=0 yet)"))
            continue
        others = [f"k={other} would {_change(gain, as_cost=True)}"
                  for other, gain in gains.items() if other != "0"]
        lines.append(head + ("; " + ", ".join(others) if others
                             else " (no other k measured yet)"))
    return lines


def _change(gain: Mapping[str, Any], as_cost: bool = False) -> str:
    """"+38% [31, 44] (12 pairs)", or as a cost "cost 4% [2, 6] (9 pairs)"."""
    ratio, low, high = gain["ratio"], gain.get("low"), gain.get("high")
    pairs = f" ({gain.get('pairs', 0)} pairs)"
    if as_cost and ratio <= 1.0:
        span = "" if low is None or high is None else \
            f" [{100 * (1 - high):.0f}, {100 * (1 - low):.0f}]"
        return f"cost {100 * (1 - ratio):.0f}%{span}{pairs}"
    span = "" if low is None or high is None else \
        f" [{100 * (low - 1):+.0f}, {100 * (high - 1):+.0f}]"
    return ("gain " if as_cost else "") + f"{100 * (ratio - 1):+.0f}%{span}{pairs}"


def step_costs_line(costs: Mapping[str, Any]) -> str:
    """The learned step costs on one line: per bucket the no-draft step and each drafted
    token's extra, e.g. "1-1 15.2 ms (+0.8 ms/drafted token) · 4-7 19.0 ms (+1.1 ms/...)"."""
    buckets = costs.get("buckets") or {}
    # three significant figures: a GPU's per-token cost is hundredths of a millisecond
    return " · ".join(f"{label} {1e3 * cell['no_draft_s']:.3g} ms "
                      f"(+{1e3 * cell['per_token_s']:.3g} ms/drafted token)"
                      for label, cell in buckets.items())

"""`whatif`'s three outputs: a terminal table, `--json`, and `--plot` (speedup against batch size).

`--json` is one object; its `methods` list holds one entry per method and k with `method`, `k`,
`drafter` (the drafter the target host runs, `drafter.host_drafter`) and `drafter_why`,
`async_scheduling` (`hidden_host_s`, the plain engine's host seconds per step its async
scheduling hides, null where not priced, and `why`: `drafter.async_scheduling`),
`requests`, `output_tokens`, `steps`, `drafted_tokens`, `accepted_tokens`,
`accepted_by_position`, and `predicted` as a list per batch size of `{batch, speedup, low, high}`
(`low`/`high`: the bootstrap interval over requests) with what priced it and its model error
(`priced_by`, `model_error`, `model_error_note`, `model_low`/`model_high`: the interval widened
by the model error, null where unknown) and whether the KV cache holds it (`fits`,
`kv_capacity_requests`; a batch that does not fit has no speedup), beside the
traffic (each count in its unit: `entries` and their `skipped`, `requests_read` and
`requests_skipped`, `stop_reason`), the cost curve with `pricing` (the hardware row, what it
rests on, why it was chosen, what it priced), `model_error` per source, `not_priced` and
`kv_capacity`, and the recommendation. `--plot`'s path and
matplotlib are checked before the run (`plot_problem`).
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import asdict
from typing import Any

import numpy as np

from vllm_specdec_plugin.core.methods import method_spec
from vllm_specdec_plugin.core.step_cost import bucket_label
from vllm_specdec_plugin.whatif.model_error import (
    STRADDLE_MARK,
    capacity_json,
    capacity_lines,
    cell,
    error_lines,
    predicted_json,
)
from vllm_specdec_plugin.whatif.run import MethodOutcome, WhatifReport

SPREAD_PERCENTILES = (10, 90)
"""The spread across requests shown for tokens per step."""


def per_request_tokens_per_step(outcome: MethodOutcome) -> np.ndarray:
    """Each request's mean tokens per verify step (requests of one token have none)."""
    r = outcome.result
    steps = r.steps.astype(np.float64)
    emitted = (r.output_tokens - 1).clip(min=0).astype(np.float64)
    keep = steps > 0
    return emitted[keep] / steps[keep]


def method_json(outcome: MethodOutcome, report: WhatifReport | None = None) -> dict[str, Any]:
    r = outcome.result
    spread = per_request_tokens_per_step(outcome)
    low, high = (np.percentile(spread, SPREAD_PERCENTILES).tolist() if len(spread)
                 else (None, None))
    drafted = int(r.drafted.sum())
    return {
        "method": r.config.method, "k": r.config.k, "label": outcome.label,
        "drafter": r.drafter, "drafter_why": r.drafter_why,
        "async_scheduling": (None if outcome.async_scheduling is None else
                             {"hidden_host_s": outcome.async_scheduling.hidden_s,
                              "why": outcome.async_scheduling.why}),
        "resolved": r.resolved, "requests": r.requests,
        "output_tokens": int(r.output_tokens.sum()), "steps": r.total_steps,
        "drafting_steps": int(r.drafting_steps.sum()), "drafted_tokens": drafted,
        "accepted_tokens": int(r.accepted.sum()),
        "accepted_tokens_past_end_open": r.past_end_open,
        "accepted_by_position": [int(x) for x in r.accepted_by_position],
        "acceptance_rate": int(r.accepted.sum()) / drafted if drafted else None,
        "drafting_share": r.drafting_share, "tokens_per_step": r.tokens_per_step,
        "tokens_per_step_spread": {f"p{SPREAD_PERCENTILES[0]}": low,
                                   f"p{SPREAD_PERCENTILES[1]}": high},
        "predicted": ([{"batch": p.batch, "speedup": p.speedup, "low": p.low, "high": p.high}
                       for p in outcome.predicted] if report is None else
                      predicted_json(outcome.predicted, report.options.batches, report.errors,
                                     report.capacity)),
        "replay_tokens_per_s": outcome.replay_tokens_per_s,
        "notes": list(r.notes)}


def curve_json(report: WhatifReport) -> dict[str, Any]:
    curve = report.curve
    return {"source": curve.source, "fixed_tokens": curve.fixed_tokens,
            "measured_buckets": [bucket_label(k) for k in sorted(curve.measured)],
            "buckets": {bucket_label(k): asdict(v) for k, v in sorted(curve.buckets.items())},
            "prior_share": report.prior_share, "pricing": report.pricing,
            "model_error": [{"priced_by": e.priced_by, "model_error": e.error,
                             "model_error_note": e.note}
                            for e in dict.fromkeys(report.errors.values())],
            "not_priced": list(report.not_priced),
            "kv_capacity": capacity_json(report.capacity, report.capacity_note)}


def to_json(report: WhatifReport) -> dict[str, Any]:
    return {"traffic": report.traffic, "model": report.model, "costs": curve_json(report),
            "methods": [method_json(o, report) for o in report.outcomes],
            "recommendation": asdict(report.recommendation), "notes": report.notes}


def dumps(report: WhatifReport) -> str:
    return json.dumps(to_json(report), indent=2, default=_plain)


def _plain(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    raise TypeError(f"not JSON: {type(value).__name__}")


def _ratio(value: float | None) -> str:
    return "-" if value is None or not math.isfinite(value) else f"{value:.2f}x"


def render_table(report: WhatifReport) -> str:
    t = report.traffic
    lines = [f"traffic: {t['path']} ({t['format']}): {t['requests']} requests, "
             f"{t['output_tokens']:,} output tokens (prompt {t['mean_prompt_tokens']:g}, "
             f"output {t['mean_completion_tokens']:g} tokens on average)"]
    lines += traffic_lines(t)
    lines.append(f"costs: {report.curve.source}")
    lines += pricing_lines(report.pricing)
    share = report.prior_share
    lines.append("  " + ("every batch size priced from measured step costs" if share == 0 else
                         f"{share:.0%} of the batch sizes priced from a prior (not measured)"))
    batches = list(report.options.batches)
    head = (f"{'method':<22}{'drafted':>9}{'accepted':>10}{'acc%':>6}{'drafting%':>10}"
            f"{'tok/step':>9}{'p10-p90':>11}  " + "".join(f"{'b=' + str(b):>8}" for b in batches))
    lines += ["", head, "-" * len(head)]
    marked = False
    for outcome in report.outcomes:
        j = method_json(outcome)
        by_batch = {p.batch: p for p in outcome.predicted}
        cells = [cell(by_batch.get(b), report.errors[b], _ratio(by_batch[b].speedup)
                      if b in by_batch else "") for b in batches]
        marked = marked or any(c.endswith(STRADDLE_MARK) for c in cells)
        spread = j["tokens_per_step_spread"]
        spread_text = ("-" if spread["p10"] is None
                       else f"{spread['p10']:.2f}-{spread['p90']:.2f}")
        rate = j["acceptance_rate"]
        lines.append(
            f"{outcome.label:<22}{j['drafted_tokens']:>9,}{j['accepted_tokens']:>10,}"
            f"{'-' if rate is None else f'{rate:.0%}':>6}{j['drafting_share']:>10.0%}"
            f"{j['tokens_per_step']:>9.2f}{spread_text:>11}  "
            + "".join(f"{c:>8}" for c in cells))
    lines += drafter_lines(report)
    lines += [f"async scheduling: {why}" for why in dict.fromkeys(
        o.async_scheduling.why for o in report.outcomes if o.async_scheduling)]
    lines.append("")
    lines.append("predicted speedup against no speculation per batch size (90% interval over "
                 "requests in --json)")
    lines += capacity_lines(report.capacity, report.capacity_note, report.pricing.get("row")
                            or "GPU", report.model["path"], batches)
    lines += error_lines(report.errors, marked, report.not_priced)
    lines += recommendation_lines(report)
    speeds = [f"{o.label} {o.replay_tokens_per_s / 1000:,.0f}k tokens/s"
              for o in report.outcomes if o.replay_tokens_per_s]
    if speeds:
        lines.append("replay speed: " + ", ".join(speeds))
    lines += report.notes
    return "\n".join(lines)


def drafter_lines(report: WhatifReport) -> list[str]:
    """Which drafter each configuration replayed, and why the target host runs it (once each)."""
    outcomes = [o for o in report.outcomes if o.result.drafter]
    if not outcomes:
        return []
    whys = dict.fromkeys((o.result.drafter, o.result.drafter_why) for o in outcomes)
    return (["drafters: " + ", ".join(f"{o.label} {o.result.drafter}" for o in outcomes)]
            + [f"  {name}: {why}" for name, why in whys])


def traffic_lines(t: dict[str, Any]) -> list[str]:
    """What was skipped, each count in its own unit, and what stopped the reading early."""
    def first(bad: dict[str, Any] | None) -> str:
        return f"; first: {bad['why']}" if bad else ""  # the why names its line

    lines = []
    if t["skipped"]:
        unit = t.get("unit", "line")
        lines.append(f"  skipped {t['skipped']} of {t['entries']} {unit}s"
                     f"{first(t['first_bad'])}")
    if t.get("requests_skipped"):
        lines.append(f"  skipped {t['requests_skipped']} of {t['requests_read']} requests when "
                     f"tokenizing{first(t.get('first_skipped_request'))}")
    if t.get("stop_reason"):
        lines.append(f"  {t['stop_reason']}")
    return lines


def pricing_lines(pricing: dict[str, Any]) -> list[str]:
    """The hardware row behind the prior, what it rests on, and why that row."""
    if not pricing:
        return []
    if pricing.get("row") is None:
        return [f"  no hardware row ({pricing['chosen_by']})"]
    return [f"  priced with the {pricing['row']} row ({pricing['title']}): {pricing['basis']}; "
            f"it priced {pricing['priced']} ({pricing['chosen_by']})"]


def recommendation_lines(report: WhatifReport) -> list[str]:
    """The option to start from, where speculation stops paying, and the schedule the
    controller would start from (`num_speculative_tokens_per_batch_size`)."""
    rec = report.recommendation
    if not any(o.predicted for o in report.outcomes):
        return ["recommended: nothing (no batch size was predicted: none fits the KV cache)"]
    if rec.best is None:
        return ["recommended: no speculation (no option's interval is above 1x at batch "
                f"{report.options.batches[0]})"]
    first = next(p for o in report.outcomes if o.label == rec.best for p in o.predicted)
    lines = [f"recommended: {rec.best} ({first.speedup:.2f}x at batch {first.batch}, 90% "
             f"{first.low:.2f}-{first.high:.2f})"]
    lines.append("  speculation stops paying at batch " + str(rec.break_point)
                 if rec.break_point is not None else
                 "  speculation pays at every predicted batch size")
    method = next(o.result.config.method for o in report.outcomes if o.label == rec.best)
    spec = method_spec(method)
    if rec.schedule and spec is not None and spec.schedule_on_v1:
        lines.append("  start the controller from: num_speculative_tokens "
                     f"{rec.num_speculative_tokens}, num_speculative_tokens_per_batch_size "
                     f"{json.dumps(rec.schedule)}")
    elif rec.schedule:
        # vLLM keeps a per-batch schedule only for the methods whose proposer honours it;
        # the adaptive proposer sizes each row's draft itself
        lines.append(f"  {method}: no per-batch schedule (vLLM takes none for it"
                     + ("; it sizes each draft from its own step costs)" if method == "adaptive"
                        else ")"))
    return lines


PLOT_SUFFIXES = (".png", ".svg", ".pdf", ".jpg", ".jpeg")
"""The image files `--plot` writes (matplotlib's format is chosen from the suffix)."""


def plot_problem(value: str) -> str | None:
    """Why `--plot value` cannot be written, checked before the run (so a bad path never costs
    the replay, nor drops the report), or None: matplotlib importable, an image suffix, not a
    directory nor a special file, its directory there and writable."""
    from pathlib import Path

    from vllm_specdec_plugin.core.errors import SpecDecodeConfigError, quote_value
    from vllm_specdec_plugin.inputs.files import local_path

    fix = f"give a file path ending in {', '.join(PLOT_SUFFIXES)} (e.g. --plot whatif.png)"
    try:
        found = local_path(value, "--plot")
    except SpecDecodeConfigError as exc:
        return exc.message
    shown = f"--plot {quote_value(value, 200)}"
    path = Path(value).expanduser()
    if found is not None and found.is_dir() or not value or value.endswith("/"):
        return f"{shown} is a directory, not an image file; {fix}"
    if found is not None and not found.is_file():
        return f"{shown} is not a regular file (a FIFO or a device); {fix}"
    if path.suffix.lower() not in PLOT_SUFFIXES:
        return f"{shown} has no image suffix; {fix}"
    parent = path.parent
    if not parent.is_dir():
        said = "is not a directory" if parent.exists() else "does not exist"
        return f"{shown}: its directory {quote_value(str(parent), 200)} {said}; {fix}"
    if not os.access(parent, os.W_OK | os.X_OK) or found is not None and not os.access(
            found, os.W_OK):
        return f"{shown} cannot be written (permission denied); {fix} in a writable directory"
    try:
        import matplotlib  # noqa: F401
    except Exception as exc:  # absent, or broken (a missing native library)
        return (f"{shown} needs matplotlib ({type(exc).__name__}: {quote_value(str(exc), 120)})"
                "; install it (pip install 'vllm-specdec-plugin[plot]') or drop --plot")
    return None


def plot(report: WhatifReport, path: str) -> None:
    """Predicted speedup against batch size, one line per method and k, its interval shaded."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2))
    for outcome in report.outcomes:
        xs = [p.batch for p in outcome.predicted]
        ax.plot(xs, [p.speedup for p in outcome.predicted], marker="o", label=outcome.label)
        ax.fill_between(xs, [p.low for p in outcome.predicted],
                        [p.high for p in outcome.predicted], alpha=0.15)
    ax.axhline(1.0, color="grey", linewidth=1, linestyle="--")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("batch size (running requests)")
    ax.set_ylabel("predicted speedup vs no speculation")
    measured = len(report.curve.measured)
    costs = ("measured" if report.prior_share == 0 else
             f"{measured} bucket(s) measured, the rest a prior" if measured else "a prior")
    ax.set_title(f"whatif: {report.traffic['requests']} requests; step costs: {costs}",
                 fontsize=9)
    batches = list(report.options.batches)
    ax.set_xticks(batches, [str(b) for b in batches])
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)

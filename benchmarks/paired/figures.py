"""Figures of a paired benchmark: per burst, per pair (CPU time, tokens), per cell."""

from __future__ import annotations

import statistics
from typing import Any

from benchmarks.lib.stats import bootstrap_median_interval, first_difference
from vllm_specdec_plugin.inputs.vllm_metrics import acceptance_rate, mean_acceptance_length


def ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1000


def spec_figures(spec: dict[str, float]) -> dict[str, float | None]:
    """Acceptance rate (accepted / draft tokens) and mean acceptance length (1 + acc / drafts)."""
    drafts, draft_tokens, accepted = spec["drafts"], spec["draft_tokens"], spec["accepted"]
    return {
        "drafts": drafts,
        "draft_tokens": draft_tokens,
        "accepted_tokens": accepted,
        "acceptance_rate": acceptance_rate(accepted, draft_tokens),
        "mean_acceptance_length": mean_acceptance_length(accepted, drafts),
    }


def burst_figures(raw: dict[str, Any]) -> dict[str, Any]:
    """Output tokens/s and median TPOT of one burst (one engine, one cell)."""
    requests = raw["requests"]
    tokens = sum(len(r["token_ids"]) for r in requests)
    tpots = [r["tpot_s"] for r in requests if r["tpot_s"] is not None]
    return {
        "output_tokens": tokens,
        "elapsed_s": raw["elapsed_s"],
        "output_tokens_per_s": tokens / raw["elapsed_s"] if raw["elapsed_s"] > 0 else None,
        "cpu_s": raw.get("cpu_s"),
        "tokens_per_cpu_s": tokens / raw["cpu_s"] if raw.get("cpu_s") else None,
        "tpot_ms_median": ms(statistics.median(tpots)) if tpots else None,
        "spec": raw["spec"],
    }


def cpu_ratio(a_before: dict[str, Any], b: dict[str, Any], a_after: dict[str, Any]
              ) -> float | None:
    """B's output tokens per CPU-second (all its processes) over the mean of the two A bursts'.

    Wall time on a shared host also counts time the VM's cores were lent elsewhere; CPU time
    counts only the work, so it shows the configuration's cost with less of the host's noise
    (it is not what a user waits for: the wall-clock ratio is the headline).
    """
    rates = [f.get("tokens_per_cpu_s") for f in (a_before, a_after)]
    mine = b.get("tokens_per_cpu_s")
    if not mine or not all(rates):
        return None
    return float(mine / (sum(rates) / 2))  # type: ignore[arg-type]


def token_check(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Requests of one pair whose greedy token ids differ between the two engines (where)."""
    expected = {r["id"]: r["token_ids"] for r in a}
    mismatches = []
    for request in b:
        tokens, reference = request["token_ids"], expected[request["id"]]
        where = first_difference(tokens, reference)
        if where is not None:
            mismatches.append({"id": request["id"], "first_difference": where,
                               "tokens": tokens[where:where + 8],
                               "baseline_tokens": reference[where:where + 8]})
    return mismatches


def summarize_cell(pairs: list[dict[str, Any]]) -> dict[str, Any]:
    """Median paired ratio (B / A output tok/s), its bootstrap interval, TPOT ratio, counters."""
    ratios = [p["ratio"] for p in pairs if p["ratio"] is not None]
    tpot_ratios = [p["tpot_ratio"] for p in pairs if p["tpot_ratio"] is not None]
    cpu_ratios = [p["cpu_ratio"] for p in pairs if p.get("cpu_ratio") is not None]
    cpu_interval = bootstrap_median_interval(cpu_ratios)
    spreads = [abs(rates[1] / rates[0] - 1) for rates in
               (p["a"].get("before_after_tok_s") for p in pairs) if rates and all(rates)]
    totals = {"drafts": 0.0, "draft_tokens": 0.0, "accepted": 0.0}
    for pair in pairs:
        for key in totals:
            totals[key] += pair["b"]["spec"][key]
    interval = bootstrap_median_interval(ratios)
    return {
        "pairs": len(pairs),
        "ratio_median": statistics.median(ratios) if ratios else None,
        "ratio_interval": list(interval) if interval else None,
        "ratios": ratios,
        "cpu_ratio_median": statistics.median(cpu_ratios) if cpu_ratios else None,
        "cpu_ratio_interval": list(cpu_interval) if cpu_interval else None,
        "cpu_ratios": cpu_ratios,
        "a_spread_median": statistics.median(spreads) if spreads else None,
        # A TPOT ratio above 1 means B's decode steps are slower
        "tpot_ratio_median": statistics.median(tpot_ratios) if tpot_ratios else None,
        "a_tokens_per_s_median": statistics.median(
            [p["a"]["output_tokens_per_s"] for p in pairs]),
        "b_tokens_per_s_median": statistics.median(
            [p["b"]["output_tokens_per_s"] for p in pairs]),
        "b_spec_decode": spec_figures(totals),
        "mismatched_requests": sum(len(p["mismatches"]) for p in pairs),
        "requests": sum(len(p["b_ids"]) for p in pairs),
        "load_average": [p["load_average"] for p in pairs],
        "foreign_cpu_share": [p["foreign_cpu_share"] for p in pairs],
    }

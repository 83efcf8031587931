"""Turn the engines' raw cell records into the per-cell figures and cross-configuration checks."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any


def percentile(values: Sequence[float], q: float) -> float | None:
    """The q-th percentile (0-100) by linear interpolation; None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1000


def spec_figures(spec: dict[str, float]) -> dict[str, float | None]:
    """Acceptance rate (accepted / draft tokens) and mean acceptance length (1 + acc / drafts)."""
    drafts, draft_tokens, accepted = spec["drafts"], spec["draft_tokens"], spec["accepted"]
    return {
        "drafts": drafts,
        "draft_tokens": draft_tokens,
        "accepted_tokens": accepted,
        "acceptance_rate": accepted / draft_tokens if draft_tokens else None,
        "mean_acceptance_length": 1 + accepted / drafts if drafts else None,
    }


def cell_figures(config: str, raw: dict[str, Any]) -> dict[str, Any]:
    """Throughput, TPOT/TTFT distribution and acceptance of one cell."""
    requests = raw["requests"]
    tokens = sum(len(r["token_ids"]) for r in requests)
    tpots = [r["tpot_s"] for r in requests if r["tpot_s"] is not None]
    ttfts = [r["ttft_s"] for r in requests if r["ttft_s"] is not None]
    return {
        "workload": raw["workload"],
        "concurrency": raw["concurrency"],
        "configuration": config,
        "requests": len(requests),
        "prompt_tokens": raw["prompt_tokens"],
        "output_tokens": tokens,
        "elapsed_s": raw["elapsed_s"],
        "output_tokens_per_s": tokens / raw["elapsed_s"] if raw["elapsed_s"] > 0 else None,
        "tpot_ms": {"median": ms(statistics.median(tpots)) if tpots else None,
                    "p90": ms(percentile(tpots, 90))},
        "ttft_ms": {"median": ms(statistics.median(ttfts)) if ttfts else None,
                    "p90": ms(percentile(ttfts, 90))},
        "spec_decode": spec_figures(raw["spec"]),
    }


def first_difference(a: Sequence[int], b: Sequence[int]) -> int | None:
    """Index of the first differing token (length mismatch counts); None when equal."""
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def token_check(raw: dict[str, Any], baseline: dict[str, Any]) -> dict[str, Any]:
    """Whether every prompt produced the baseline's token ids, and where it did not."""
    expected = {r["id"]: r["token_ids"] for r in baseline["requests"]}
    mismatches = []
    for request in raw["requests"]:
        tokens, reference = request["token_ids"], expected[request["id"]]
        where = first_difference(tokens, reference)
        if where is not None:
            mismatches.append({"id": request["id"], "first_difference": where,
                               "tokens": tokens[where:where + 8],
                               "baseline_tokens": reference[where:where + 8]})
    return {"tokens_match": not mismatches, "mismatches": mismatches}


def compare(cells: dict[str, list[dict[str, Any]]], baseline: str) -> list[dict[str, Any]]:
    """Figures for every configuration's cells, with speedup and token check vs `baseline`."""
    base = {(c["workload"], c["concurrency"]): c for c in cells[baseline]}
    out = []
    for config, raws in cells.items():
        for raw in raws:
            ref = base[(raw["workload"], raw["concurrency"])]
            figures = cell_figures(config, raw)
            base_rate = cell_figures(baseline, ref)["output_tokens_per_s"]
            rate = figures["output_tokens_per_s"]
            figures["speedup"] = rate / base_rate if rate and base_rate else None
            figures.update(token_check(raw, ref))
            out.append(figures)
    return out


def median_of(values: Sequence[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def combine_rounds(rounds: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """One figure per cell from several rounds of `compare` output (cells in any order).

    Throughput, TPOT/TTFT and speedup are medians over rounds; each round's speedup is against
    that round's own baseline, so slow phases of a shared host cancel out of the ratio. Spec
    counters are summed over rounds; tokens must match in every round.
    """
    def key(fig: dict[str, Any]) -> tuple[str, int, str]:
        return fig["workload"], fig["concurrency"], fig["configuration"]

    by_key = [{key(fig): fig for fig in figures} for figures in rounds]
    combined = []
    for first in rounds[0]:
        per_round = [figures[key(first)] for figures in by_key]
        totals = {"drafts": 0.0, "draft_tokens": 0.0, "accepted": 0.0}
        for fig in per_round:
            totals["drafts"] += fig["spec_decode"]["drafts"]
            totals["draft_tokens"] += fig["spec_decode"]["draft_tokens"]
            totals["accepted"] += fig["spec_decode"]["accepted_tokens"]
        speedups = [fig["speedup"] for fig in per_round]
        mismatched = [fig for fig in per_round if not fig["tokens_match"]]
        combined.append({
            **first,
            "elapsed_s": median_of([fig["elapsed_s"] for fig in per_round]),
            "output_tokens_per_s": median_of([fig["output_tokens_per_s"] for fig in per_round]),
            "tpot_ms": {q: median_of([fig["tpot_ms"][q] for fig in per_round])
                        for q in ("median", "p90")},
            "ttft_ms": {q: median_of([fig["ttft_ms"][q] for fig in per_round])
                        for q in ("median", "p90")},
            "spec_decode": spec_figures(totals),
            "speedup": median_of(speedups),
            "speedup_rounds": speedups,
            "tokens_match": not mismatched,
            "mismatches": mismatched[0]["mismatches"] if mismatched else [],
        })
    return combined

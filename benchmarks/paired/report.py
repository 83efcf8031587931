"""Write a paired benchmark result as JSON, Markdown tables and a ratio-vs-concurrency plot."""

from __future__ import annotations

import json
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.lib.results import write_json
from benchmarks.lib.stats import bootstrap_median_interval
from benchmarks.lib.workloads import uniform_range
from benchmarks.paired.figures import summarize_cell
from benchmarks.paired.targets import target

MISMATCH_NOTE = (
    "\"same tokens: NO (m/n)\": m of the cell's n greedy outputs of B differ from A's in the "
    "same pair; NAME.json lists each one's first differing position and tokens. In bf16 on CPU, "
    "verifying k+1 tokens in one forward pass changes matmul shapes and rounding, so a near-tie "
    "between the two most likely tokens can flip; with `--dtype float32` they match."
)
COLUMNS = ("concurrency", "ratio B/A (median)", "90% interval", "per pair", "TPOT B/A",
           "CPU-time B/A", "A burst to burst", "A tok/s", "B tok/s", "B accept rate",
           "same tokens", "load avg", "foreign CPU", "target", "met")
CONTENDED = 0.05
"""A pair whose other processes used more than this share of the cores ran on a busy host."""


def fmt(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def verdict(met: bool | None) -> str:
    return {True: "yes", False: "**MISS**", None: "-"}[met]


def row(cell: dict[str, Any]) -> list[str]:
    low_high = cell["ratio_interval"]
    interval = "-" if not low_high else f"[{low_high[0]:.3f}, {low_high[1]:.3f}]"
    mismatched = cell["mismatched_requests"]
    same = "yes" if not mismatched else f"NO ({mismatched}/{cell['requests']})"
    loads = cell["load_average"]
    foreign = cell["foreign_cpu_share"]
    return [str(cell["concurrency"]), fmt(cell["ratio_median"]), interval,
            " ".join(fmt(r, 2) for r in cell["ratios"]), fmt(cell["tpot_ratio_median"]),
            fmt(cell.get("cpu_ratio_median")),
            "-" if cell.get("a_spread_median") is None else f"±{cell['a_spread_median']:.1%}",
            fmt(cell["a_tokens_per_s_median"], 1), fmt(cell["b_tokens_per_s_median"], 1),
            fmt(cell["b_spec_decode"]["acceptance_rate"], 2), same,
            f"{min(loads):.1f}-{max(loads):.1f}" if loads else "-",
            f"{max(foreign):.0%}" if foreign else "-", cell["target"], verdict(cell["met"])]


def table(header: Sequence[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(r) + " |" for r in rows]


def configuration_lines(result: dict[str, Any]) -> list[str]:
    lines = []
    for label, info in result["configurations"].items():
        spec = info.get("resolved", {}).get("speculative_config")
        decided = ""
        if info.get("decision"):
            decided = f"; plugin decision: source `{info['decision'].get('source')}`"
        lines.append(f"- {label} = `{info['name']}`: {info['description']}; engine ran with "
                     f"`{json.dumps(spec, sort_keys=True)}`{decided}; engine start "
                     f"{fmt(info.get('startup_s'), 0)} s")
        stats = info.get("adaptive_stats")
        if stats:
            lines.append(f"  - its adaptive proposer: {fmt(stats.get('us_per_row'), 1)} µs per "
                         f"row per step overall, {fmt(stats.get('us_per_row_awake'), 1)} awake, "
                         f"{fmt(stats.get('us_per_row_dormant'), 1)} dormant "
                         f"({stats.get('awake_cycles', 0)} awake and "
                         f"{stats.get('dormant_cycles', 0)} dormant cycles, "
                         f"{stats.get('dormant_entries', 0)} times dormant); draft tokens "
                         f"{stats.get('draft_tokens')}, accepted {stats.get('accepted_tokens')}")
            for mode, cells in (stats.get("cost_by_batch") or {}).items():
                lines.append(f"  - {mode}, µs per row [per call] by batch size: " + ", ".join(
                    f"{label}: {fmt(cell['us_per_row'], 1)} [{fmt(cell['us_per_call'], 0)}]"
                    for label, cell in cells.items()))
    return lines


def misses(result: dict[str, Any]) -> list[str]:
    out = []
    for cell in result["cells"]:
        if cell["met"] is False:
            low_high = cell["ratio_interval"] or [None, None]
            busy = [p for p in cell["pair_records"] if p["foreign_cpu_share"] > CONTENDED]
            why = (f"; {len(busy)}/{cell['pairs']} pairs ran while other processes used more "
                   f"than {CONTENDED:.0%} of the CPU" if busy else "")
            out.append(f"- {cell['workload']} c={cell['concurrency']}: median "
                       f"{fmt(cell['ratio_median'])}, interval [{fmt(low_high[0])}, "
                       f"{fmt(low_high[1])}] against \"{cell['target']}\"{why}")
    return out


def pooled(result: dict[str, Any]) -> list[dict[str, Any]]:
    """Per concurrency, every workload's pairs together: the median ratio and its interval
    (the configuration's cost at a batch size, with as many pairs as there are workloads x
    pairs; each workload's own cell stays the per-workload verdict)."""
    out = []
    for concurrency in result["meta"]["concurrency"]:
        ratios = [r for c in result["cells"] if c["concurrency"] == concurrency
                  for r in c["ratios"]]
        if not ratios:
            continue
        out.append({"concurrency": concurrency, "pairs": len(ratios),
                    "ratio_median": statistics.median(ratios),
                    "ratio_interval": bootstrap_median_interval(ratios)})
    return out


def pooled_lines(result: dict[str, Any]) -> list[str]:
    rows = pooled(result)
    if len(result["meta"]["workloads"]) < 2 or not rows:
        return []
    body = [[str(r["concurrency"]), str(r["pairs"]), fmt(r["ratio_median"]),
             "-" if not r["ratio_interval"] else
             f"[{r['ratio_interval'][0]:.3f}, {r['ratio_interval'][1]:.3f}]"] for r in rows]
    return ["## All workloads pooled, per concurrency", "",
            "Every pair of every workload at that concurrency together (more pairs, so a "
            "narrower interval for what is common to all workloads, such as the price of a "
            "speculative config that drafts nothing).", "",
            *table(("concurrency", "pairs", "ratio B/A (median)", "90% interval"), body), ""]


def lengths_text(meta: dict[str, Any]) -> str:
    """The output lengths as the run drew them (`benchmarks/lib/workloads.output_lengths`)."""
    tokens = meta["max_tokens"]
    if meta.get("lengths", "fixed") == "fixed":
        return f"{tokens} tokens per request"
    low, high = uniform_range(tokens)
    return (f"output lengths drawn uniformly from {low} to {high} tokens per request (the "
            "same on both engines)")


def markdown(result: dict[str, Any]) -> str:
    meta = result["meta"]
    contended = [p for c in result["cells"] for p in c["pair_records"]
                 if p["foreign_cpu_share"] > CONTENDED]
    total_pairs = sum(c["pairs"] for c in result["cells"])
    quiet = ("The host was quiet: no pair saw other processes use more than "
             f"{CONTENDED:.0%} of the CPU." if not contended else
             f"**The host was not quiet**: {len(contended)} of {total_pairs} pairs ran while "
             f"other processes used more than {CONTENDED:.0%} of the CPU (column foreign CPU).")
    lines = [f"# Paired benchmark: {meta['name']}", "",
             f"Command: `{meta['command']}`", "",
             f"Model `{meta['model']}`, vLLM {meta['vllm_version']} on {meta['platform']} "
             f"({meta['cpu_count']} CPUs), dtype {meta['dtype']}, greedy, {lengths_text(meta)} "
             f"(ignore_eos){', quick run' if meta['quick'] else ''}. "
             f"Wall time {meta['wall_s']:.0f} s; host load average "
             f"{meta['load_average_start'][0]:.1f} at start, {meta['load_average_end'][0]:.1f} "
             "at the end.",
             "",
             "Both engines up at once; per cell one warm-up burst each, then A B A B ... B A "
             f"({meta['pairs']} B bursts), every burst on the cell's same N prompts (N = "
             "concurrency, all in flight until each has its tokens). Ratio = B's output tok/s "
             "over the mean of the two A bursts around it; the cell gives the median over pairs "
             "and a "
             "90% percentile-bootstrap interval of that median (10000 resamples, seed 0). "
             "TPOT B/A > 1: B's decode steps are slower. CPU-time B/A: the same ratio in "
             "output tokens per CPU-second of each engine's processes. A burst to burst: the "
             "median change between the two A bursts around a pair (the host's noise at the "
             "scale of one burst). Load avg: 1-minute load average at "
             "each pair's start; foreign CPU: the largest share of all cores' time used by "
             "processes other than the benchmark's during a pair.", "", quiet, "",
             "## Configurations", "", *configuration_lines(result), ""]
    for workload in meta["workloads"]:
        cells = [c for c in result["cells"] if c["workload"] == workload]
        lines += [f"## {workload}", "", result["workload_descriptions"].get(workload, ""), ""]
        lines += table(COLUMNS, [row(c) for c in cells]) + [""]
    lines += pooled_lines(result)
    missed = misses(result)
    lines += ["## Cells that miss their target", "", *(missed or ["None."]), ""]
    if any(c["mismatched_requests"] for c in result["cells"]):
        lines += [MISMATCH_NOTE, ""]
    return "\n".join(lines)


def plot(result: dict[str, Any], path: Path) -> None:
    """Median ratio with its interval against concurrency, one panel per workload."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    meta = result["meta"]
    workloads = meta["workloads"]
    fig, axes = plt.subplots(1, len(workloads), figsize=(4.5 * len(workloads), 3.8),
                             squeeze=False, sharey=True)
    for ax, workload in zip(axes[0], workloads, strict=True):
        cells = [c for c in result["cells"] if c["workload"] == workload
                 and c["ratio_median"] is not None]
        xs = [c["concurrency"] for c in cells]
        ys = [c["ratio_median"] for c in cells]
        errors = [[y - c["ratio_interval"][0] for y, c in zip(ys, cells, strict=True)],
                  [c["ratio_interval"][1] - y for y, c in zip(ys, cells, strict=True)]]
        ax.errorbar(xs, ys, yerr=errors, marker="o", capsize=3)
        ax.axhline(1.0, color="grey", linewidth=0.8, linestyle="--")
        ax.set_xscale("log", base=2)
        ax.set_xticks(meta["concurrency"], labels=map(str, meta["concurrency"]))
        ax.set_title(workload)
        ax.set_xlabel("concurrency")
    names = [info["name"] for info in result["configurations"].values()]
    axes[0][0].set_ylabel(f"{names[1]} / {names[0]} (output tok/s)")
    fig.suptitle(f"{meta['name']}: median paired ratio, 90% interval")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def write(result: dict[str, Any], out_dir: Path) -> list[Path]:
    """NAME.json, NAME.md and NAME.png in `out_dir`."""
    out_dir.mkdir(parents=True, exist_ok=True)
    name = result["meta"]["name"]
    paths = [out_dir / f"{name}.json", out_dir / f"{name}.md", out_dir / f"{name}.png"]
    result = {**result, "pooled": pooled(result)}
    write_json(paths[0], result, indent=1)
    paths[1].write_text(markdown(result) + "\n")
    plot(result, paths[2])
    return paths


def rerender(path: Path) -> list[Path]:
    """Recompute every cell's summary from its pair records and write NAME.md/.png (and the
    JSON) again: a result file is re-reported with the current figures and tables."""
    result = json.loads(path.read_text())
    result.pop("pooled", None)
    for cell in result["cells"]:
        summary = summarize_cell(cell["pair_records"])
        cell.update(summary)
        cell.update(target(result["meta"]["kind"], cell["workload"],
                           {**summary, "concurrency": cell["concurrency"]},
                           result["meta"].get("configs", ["none"])[0]))
    return write(result, path.parent)


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m benchmarks report RESULT.json ...`: re-report result files."""
    import argparse

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("results", type=Path, nargs="+")
    for path in parser.parse_args(argv).results:
        for written in rerender(path):
            print(written)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())


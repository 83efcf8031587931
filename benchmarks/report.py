"""Write a benchmark result as Markdown tables and a speedup-vs-concurrency plot."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

MISMATCH_NOTE = (
    "\"same tokens: NO (m/n)\": m of the cell's n greedy outputs differ from `none`'s; "
    "results.json lists each one's first differing position and tokens. In bf16 on CPU, "
    "verifying k+1 tokens in one forward pass changes matmul shapes and rounding, so a near-tie "
    "between the two most likely tokens can flip (seen here: logprobs -0.64 vs -0.76 without "
    "speculation, an exact tie with it; with `--dtype float32` that prompt matched, logprobs "
    "identical)."
)
COLUMNS = ("concurrency", "configuration", "output tok/s", "TPOT ms p50", "TPOT ms p90",
           "accept rate", "mean accept len", "speedup", "per round", "same tokens")


def fmt(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def row(cell: dict[str, Any]) -> list[str]:
    spec = cell["spec_decode"]
    same = "yes" if cell["tokens_match"] else f"NO ({len(cell['mismatches'])}/{cell['requests']})"
    return [str(cell["concurrency"]), cell["configuration"], fmt(cell["output_tokens_per_s"]),
            fmt(cell["tpot_ms"]["median"]), fmt(cell["tpot_ms"]["p90"]),
            fmt(spec["acceptance_rate"], 2), fmt(spec["mean_acceptance_length"], 2),
            fmt(cell["speedup"], 2),
            " / ".join(fmt(value, 2) for value in cell.get("speedup_rounds", [])), same]


def table(header: Sequence[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(r) + " |" for r in rows]


def configuration_lines(result: dict[str, Any]) -> list[str]:
    """One line per configuration: what the engine actually ran with."""
    lines = []
    for name, info in result["configurations"].items():
        if info.get("skipped"):
            lines.append(f"- `{name}`: skipped ({info['skipped']})")
            continue
        spec = info["resolved"]["speculative_config"]
        decided = ""
        if info.get("decision"):
            decided = f"; plugin decision: source `{info['decision'].get('source')}`"
        starts = ", ".join(f"{r['startup_s']:.0f}" for r in info["rounds"])
        loads = ", ".join(f"{r['load_average'][0]:.1f} -> {r['load_average'][1]:.1f}"
                          for r in info["rounds"])
        lines.append(f"- `{name}`: {info['description']}; engine ran with "
                     f"`{json.dumps(spec, sort_keys=True)}`{decided}; "
                     f"engine start {starts} s; host load average {loads}")
    return lines


def cost_lines(cost: dict[str, Any] | None) -> list[str]:
    if not cost:
        return []
    decide = cost["decide"]
    return ["## The plugin's own cost", "",
            f"- `import vllm_specdec_plugin` in a fresh process: median "
            f"{cost['import_ms']['median']:.2f} ms over {cost['import_ms']['runs']} processes",
            f"- `register()` with vLLM already imported: {cost['register_ms']:.2f} ms",
            f"- `assemble(...)` ({decide['case']}): first call {decide['first_ms']:.2f} ms, then "
            f"median {decide['median_us']:.1f} us over {decide['calls']} calls", ""]


def markdown(result: dict[str, Any]) -> str:
    """The whole result as Markdown: setup, configurations, one table per workload, cost."""
    meta = result["meta"]
    lines = ["# Speculative decoding benchmark", "",
             f"Model `{meta['model']}`, vLLM {meta['vllm_version']} on {meta['platform']} "
             f"({meta['cpu_count']} CPUs), greedy, max_tokens {meta['max_tokens']}, stop at EOS"
             f"{', quick run' if meta['quick'] else ''}. Wall time {meta['wall_s']:.0f} s.",
             f"Concurrency = requests in flight (closed loop); requests per cell "
             f"{meta['requests_per_cell']}. {meta.get('rounds', 1)} round(s): each round starts "
             f"one engine per configuration, in rotating order. Speedup = output tok/s / "
             f"`none`'s in the same round; the table gives the median over rounds (and each "
             f"round's), tok/s and TPOT are medians over rounds, acceptance sums all rounds.",
             "", "## Configurations", "", *configuration_lines(result), ""]
    for workload in meta["workloads"]:
        cells = [c for c in result["cells"] if c["workload"] == workload]
        lines += [f"## {workload}", "", result["workload_descriptions"].get(workload, ""), ""]
        lines += table(COLUMNS, [row(c) for c in cells]) + [""]
    if any(not c["tokens_match"] for c in result["cells"]):
        lines += [MISMATCH_NOTE, ""]
    return "\n".join(lines + cost_lines(result.get("plugin_cost")))


def plot(result: dict[str, Any], path: Path) -> None:
    """Speedup vs concurrency, one panel per workload, one line per configuration."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    workloads = result["meta"]["workloads"]
    fig, axes = plt.subplots(1, len(workloads), figsize=(4.5 * len(workloads), 3.8),
                             squeeze=False, sharey=True)
    for ax, workload in zip(axes[0], workloads, strict=True):
        cells = [c for c in result["cells"] if c["workload"] == workload]
        for config in dict.fromkeys(c["configuration"] for c in cells):
            if config == result["meta"]["baseline"]:
                continue
            points = [(c["concurrency"], c["speedup"]) for c in cells
                      if c["configuration"] == config and c["speedup"] is not None]
            ax.plot(*zip(*points, strict=True), marker="o", label=config)
        ax.axhline(1.0, color="grey", linewidth=0.8, linestyle="--")
        ax.set_xscale("log", base=2)
        ax.set_xticks(result["meta"]["concurrency"], labels=map(str, result["meta"]["concurrency"]))
        ax.set_title(workload)
        ax.set_xlabel("concurrency")
    axes[0][0].set_ylabel("speedup vs none (output tok/s)")
    axes[0][-1].legend(fontsize="small")
    fig.suptitle(Path(result["meta"]["model"]).name)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def write(result: dict[str, Any], out_dir: Path) -> list[Path]:
    """results.json, results.md and speedup.png in `out_dir`."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [out_dir / "results.json", out_dir / "results.md", out_dir / "speedup.png"]
    paths[0].write_text(json.dumps(result, indent=1) + "\n")
    paths[1].write_text(markdown(result) + "\n")
    plot(result, paths[2])
    return paths

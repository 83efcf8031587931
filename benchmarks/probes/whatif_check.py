"""`vllm-specdec whatif` against the engine: exactness and prediction (docs/operations.md).

    python -m benchmarks whatif_check --switchback [--seconds 40] [--warmup 10]   # alone
    python -m benchmarks whatif_check [--out benchmarks/results/whatif-check.json]

`--switchback` runs the in-engine switchback (`schedule_switchback.run_cell`: one opted-in
in-process engine on SmolLM2-135M, arms k0 and k5 of KAITO's ngram alternating in blocks of
decode steps) at concurrency 1 and 4 on each workload with `--tokens` tokens per request, and
keeps each cell's ratio with its interval and the step costs the engine's controller learned
in that cell (`StepCostTable.summary()`, the form the snapshot and `status --json` carry). It
times the engine: run it alone on the host.

Without `--switchback` it reports, from the files `whatif_serve` and `--switchback` wrote in
benchmarks/results/whatif/: (1) exactness: the replay's drafted and accepted tokens against
vLLM's counters for the same requests served one at a time (ngram with KAITO's config, and
suffix); (2) prediction: `whatif`'s predicted speedup of ngram k=5 at batch 1 and 4 against the
switchback's measured ratio, once with the engine's learned costs (`--costs`) and once with the
CPU prior alone. Nothing is timed there except the replay's own speed.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.lib.results import RESULTS_DIR, command, vllm_version, write_json
from benchmarks.lib.workloads import WORKLOADS

WHATIF_DIR = RESULTS_DIR / "whatif"
SWITCHBACK = WHATIF_DIR / "switchback.json"
CONCURRENCIES = (1, 4)
KEYS = (("drafted_tokens", "num_draft_tokens"), ("accepted_tokens", "num_accepted_tokens"),
        ("drafting_steps", "num_drafts"))


def run_switchback(args: argparse.Namespace) -> dict[str, Any]:
    from benchmarks.lib.engine_setup import start_llm
    from benchmarks.probes.schedule_switchback import run_cell, runtime_of

    llm = start_llm(args.model, 32, env={"KAITO_ENABLE_SPECULATIVE_DECODING": "true"})
    tokenizer = llm.get_tokenizer()
    cells = []
    for workload in args.workloads:
        for concurrency in CONCURRENCIES:
            cell = run_cell(llm, tokenizer, workload, concurrency, "k0,k5", args.warmup,
                            args.seconds, args.tokens)
            cell["step_costs"] = runtime_of(llm).controller.costs.summary()
            cells.append(cell)
            print("CELL", json.dumps(cell), flush=True)
    return {"meta": {"kind": "whatif-switchback", "command": command(
        "whatif_check", ["--switchback", *sys.argv[2:]]), "vllm": vllm_version(),
        "warmup_per_cell": args.warmup, "seconds_per_cell": args.seconds,
        "tokens_per_request": args.tokens}, "cells": cells}


def costs_file(cells: list[dict[str, Any]], workload: str, path: Path) -> Path:
    """The step costs the engine learned serving `workload` (each bucket from the cell that
    measured it most), in the snapshot's form (`{"step_costs": {"rows>=N": ...}}`), as
    `--costs` reads it."""
    merged: dict[str, Any] = {}

    def samples(entry: dict[str, Any]) -> float:
        return float(entry.get("no_draft_samples") or 0) + float(entry.get("drafting_samples")
                                                                 or 0)

    for cell in cells:  # per bucket the cell that measured it most (each restarts the table)
        if cell["workload"] == workload:
            for key, entry in (cell.get("step_costs") or {}).items():
                if key not in merged or samples(entry) > samples(merged[key]):
                    merged[key] = entry
    write_json(path, {"step_costs": merged}, indent=1)
    return path


def served_requests(model: str, method: str) -> tuple[list[Any], list[dict[str, Any]]]:
    """Every request `whatif_serve --method METHOD` served, in the order it served them (one
    engine, so the suffix cache saw them in this order), each with the model's continuation
    past its end where the probe recorded one; and the per-workload engine files."""
    from dataclasses import replace

    import numpy as np

    from vllm_specdec_plugin.inputs.traffic import read_traffic
    from vllm_specdec_plugin.whatif.tokens import load_tokenizer, tokenize_traffic

    tokenizer = load_tokenizer(model)
    files = sorted((json.loads(f.read_text()) for f in WHATIF_DIR.glob(f"engine-{method}-*.json")),
                   key=lambda d: d["meta"]["order"])
    requests: list[Any] = []
    for data in files:
        traffic = read_traffic(WHATIF_DIR / data["meta"]["traffic"])
        tokenized = tokenize_traffic(tokenizer, traffic.records)
        assert len(tokenized.requests) == data["meta"]["requests"], data["meta"]
        data["slice"] = (len(requests), len(requests) + len(tokenized.requests))
        for request, more in zip(tokenized.requests, data["continuations"], strict=True):
            extra = None if more is None else np.asarray(more, dtype=np.int32)
            requests.append(replace(request, continuation=extra))
    return requests, files


def exactness(model: str) -> list[dict[str, Any]]:
    from dataclasses import replace

    from vllm_specdec_plugin.whatif.replay import replay
    from vllm_specdec_plugin.whatif.types import MethodConfig

    rows = []
    for method in ("ngram", "suffix"):
        requests, files = served_requests(model, method)
        if not files:
            continue
        spec = files[0]["meta"]["speculative_config"]
        config = MethodConfig(method, int(spec["num_speculative_tokens"]),
                              spec["prompt_lookup_min"] if method == "ngram" else None,
                              spec["prompt_lookup_max"] if method == "ngram" else None)
        limit = 2048  # the probes' engines (benchmarks/lib/engine_setup.ENGINE_DEFAULTS)
        exact = replay(requests, config, max_model_len=limit)
        log_only = replay([replace(r, continuation=None) for r in requests], config,
                          max_model_len=limit)
        for data in files:
            low, high = data["slice"]
            engine = data["engine"]
            row: dict[str, Any] = {"method": method, "workload": data["meta"]["workload"],
                                   "requests": high - low,
                                   "engine": {ours: engine.get(theirs) for ours, theirs in KEYS},
                                   "continuations": sum(c is not None
                                                        for c in data["continuations"])}
            for name, result in (("replay", exact), ("replay_log_only", log_only)):
                got = {"drafted_tokens": int(result.drafted[low:high].sum()),
                       "accepted_tokens": int(result.accepted[low:high].sum()),
                       "drafting_steps": int(result.drafting_steps[low:high].sum())}
                row[name] = got
                row[f"{name}_error"] = {ours: (got[ours] - engine[theirs]) / engine[theirs]
                                        for ours, theirs in KEYS if engine.get(theirs)}
            row["within_1pct"] = all(abs(e) <= 0.01 for e in row["replay_error"].values())
            rows.append(row)
        rows.append({"method": method, "replay_tokens_per_s":
                     float(exact.output_tokens.sum()) / exact.seconds if exact.seconds else None,
                     "past_end_open_log_only": log_only.past_end_open})
    return rows


def prediction(model: str) -> list[dict[str, Any]]:
    from vllm_specdec_plugin.whatif.run import WhatifOptions, run_whatif
    from vllm_specdec_plugin.whatif.types import MethodConfig

    measured = json.loads(SWITCHBACK.read_text())["cells"]
    config = MethodConfig("ngram", 5, None, 4)
    rows = []
    for workload in sorted({c["workload"] for c in measured}):
        traffic = str(WHATIF_DIR / f"traffic-ngram-{workload}.jsonl")
        costs = costs_file(measured, workload, WHATIF_DIR / f"costs-{workload}.json")
        by_source = {
            "engine costs": run_whatif(WhatifOptions(model, traffic, (config,), str(costs),
                                                     batches=CONCURRENCIES)),
            "cpu prior": run_whatif(WhatifOptions(model, traffic, (config,),
                                                  batches=CONCURRENCIES))}
        modelled = switchback_model(model, traffic, costs)
        for cell in (c for c in measured if c["workload"] == workload):
            got = cell["cell"]
            sim = modelled[cell["concurrency"]]
            rows.append({"workload": workload, "concurrency": cell["concurrency"],
                         "costs": "engine costs, switchback modelled",
                         "measured": {k: got[k] for k in ("throughput_ratio", "throughput_low",
                                                          "throughput_high", "ratio", "low",
                                                          "high", "pairs")},
                         "predicted": {"speedup": sim["throughput_ratio"],
                                       "low": sim["throughput_ratio"],
                                       "high": sim["throughput_ratio"]},
                         "error": sim["throughput_ratio"] / got["throughput_ratio"] - 1,
                         "inside_interval": got["throughput_low"] <= sim["throughput_ratio"]
                         <= got["throughput_high"]})
            rows[-1]["met"] = rows[-1]["inside_interval"] or abs(rows[-1]["error"]) <= 0.05
            for source, report in by_source.items():
                [predicted] = [p for p in report.outcomes[0].predicted
                               if p.batch == cell["concurrency"]]
                # the prediction is of tokens/s over the traffic: the switchback's throughput
                # ratio (total tokens over total seconds of each arm over the same pairs) is
                # the same quantity; its median of per-pair ratios is kept beside it
                inside = got["throughput_low"] <= predicted.speedup <= got["throughput_high"]
                error = predicted.speedup / got["throughput_ratio"] - 1
                rows.append({"workload": workload, "concurrency": cell["concurrency"],
                             "costs": source, "measured": {
                                 k: got[k] for k in ("throughput_ratio", "throughput_low",
                                                     "throughput_high", "ratio", "low", "high",
                                                     "pairs")},
                             "predicted": {"speedup": predicted.speedup, "low": predicted.low,
                                           "high": predicted.high},
                             "error": error, "inside_interval": inside,
                             "met": inside or abs(error) <= 0.05})
    return rows


RUNS = WHATIF_DIR / "runs.json"


def against_runs(model: str) -> list[dict[str, Any]]:
    """The plain prediction against `run_pairs`' runs (k5 against k0, whole requests, decode
    seconds): steady state at batch c, and c > 1 also as run_pairs loads it (batches served in
    lockstep, `switchback_model.lockstep`)."""
    from benchmarks.probes.switchback_model import lockstep
    from vllm_specdec_plugin.whatif.run import WhatifOptions, run_whatif
    from vllm_specdec_plugin.whatif.types import MethodConfig

    config = MethodConfig("ngram", 5, None, 4)
    rows = []
    for cell in json.loads(RUNS.read_text())["cells"]:
        if cell["arms"][0] == cell["arms"][1]:
            rows.append({"workload": cell["workload"], "concurrency": cell["concurrency"],
                         "aa": True, "measured": cell})
            continue
        workload, c = cell["workload"], cell["concurrency"]
        traffic = str(WHATIF_DIR / f"traffic-ngram-{workload}.jsonl")
        costs = WHATIF_DIR / f"costs-{workload}.json"
        for source, path in (("engine costs", str(costs)), ("cpu prior", None)):
            report = run_whatif(WhatifOptions(model, traffic, (config,), path, batches=(c,)))
            [predicted] = report.outcomes[0].predicted
            models = [("steady", predicted.speedup, predicted.low, predicted.high)]
            if c > 1:
                value = lockstep(report.outcomes[0].result, report.curve, c)
                models.append(("lockstep", value, value, value))
            for name, value, low, high in models:
                error = value / cell["ratio"] - 1
                inside = cell["low"] <= value <= cell["high"]
                rows.append({"workload": workload, "concurrency": c, "costs": source,
                             "model": name, "measured": {k: cell[k] for k in (
                                 "ratio", "low", "high", "pairs", "median_pair_ratio")},
                             "predicted": {"speedup": value, "low": low, "high": high},
                             "error": error, "inside_interval": inside,
                             "met": inside or abs(error) <= 0.05})
    return rows


def _pct(value: float) -> str:
    return f"{100 * value:+.1f}%"


def markdown(out: dict[str, Any]) -> str:
    """The three tables docs/whatif.md quotes (tests/unit/test_docs_figures.py checks that
    the page's rows are these)."""
    lines = ["| method | workload | requests | engine: drafts / draft tokens / accepted | "
             "replay | error | from the log alone: accepted |",
             "|---|---|---|---|---|---|---|"]
    for row in (r for r in out["exactness"] if "workload" in r):
        e, got, alone = row["engine"], row["replay"], row["replay_log_only"]
        worst = max(row["replay_error"].values(), key=abs)
        lines.append(
            f"| {row['method']} | {row['workload']} | {row['requests']} | "
            f"{e['drafting_steps']:,} / {e['drafted_tokens']:,} / {e['accepted_tokens']:,} | "
            f"{got['drafting_steps']:,} / {got['drafted_tokens']:,} / "
            f"{got['accepted_tokens']:,} | {_pct(worst)} | {alone['accepted_tokens']:,} |")
    lines += ["", "| workload | concurrency | run k5 / k0 decode (90%) | costs | model | "
              "predicted (90%) | error | met |", "|---|---|---|---|---|---|---|---|"]
    for row in out.get("runs", []):
        m = row["measured"]
        if row.get("aa"):
            lines.append(f"| {row['workload']} (A/A: k0 / k0) | {row['concurrency']} | "
                         f"{m['ratio']:.3f} ({m['low']:.3f}-{m['high']:.3f}) | - | - | - | - "
                         "| - |")
            continue
        p = row["predicted"]
        shown = (f"{p['speedup']:.3f} ({p['low']:.3f}-{p['high']:.3f})"
                 if row["model"] == "steady" else f"{p['speedup']:.3f}")
        lines.append(
            f"| {row['workload']} | {row['concurrency']} | {m['ratio']:.3f} ({m['low']:.3f}-"
            f"{m['high']:.3f}) | {row['costs']} | {row['model']} | {shown} | "
            f"{_pct(row['error'])} | {'yes' if row['met'] else '**no**'} |")
    lines += ["", "| workload | concurrency | measured k5 / k0 tokens/s (90%) | median of pairs "
              "| costs | predicted (90%) | error | met |", "|---|---|---|---|---|---|---|---|"]
    for row in out["prediction"]:
        m, p = row["measured"], row["predicted"]
        lines.append(
            f"| {row['workload']} | {row['concurrency']} | {m['throughput_ratio']:.3f} "
            f"({m['throughput_low']:.3f}-{m['throughput_high']:.3f}) | {m['ratio']:.3f} | "
            f"{row['costs']} | {p['speedup']:.3f} ({p['low']:.3f}-{p['high']:.3f}) | "
            f"{_pct(row['error'])} | {'yes' if row['met'] else '**no**'} |")
    return "\n".join(lines) + "\n"


def switchback_model(model: str, traffic: str, costs: Path) -> dict[int, dict[str, Any]]:
    """The switchback's own statistic, simulated on the replayed traffic with the same costs
    (`switchback_model.py`): what the engine's switchback should read, per concurrency."""
    from benchmarks.probes.switchback_model import simulate
    from vllm_specdec_plugin.inputs.traffic import read_traffic
    from vllm_specdec_plugin.whatif.costs import load_costs
    from vllm_specdec_plugin.whatif.tokens import load_tokenizer, tokenize_traffic

    requests = tokenize_traffic(load_tokenizer(model), read_traffic(traffic).records).requests
    curve = load_costs(str(costs))
    return {c: simulate(requests, 5, (4, 4), curve, c) for c in CONCURRENCIES}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--switchback", action="store_true")
    parser.add_argument("--workloads", type=lambda s: s.split(","), default=list(WORKLOADS))
    parser.add_argument("--warmup", type=float, default=10.0)
    parser.add_argument("--seconds", type=float, default=40.0)
    parser.add_argument("--tokens", type=int, default=96)
    parser.add_argument("--model", help="a checkpoint directory (default: SmolLM2-135M)")
    parser.add_argument("--out", default=str(RESULTS_DIR / "whatif-check.json"))
    args = parser.parse_args(argv)
    if args.switchback:
        write_json(SWITCHBACK, run_switchback(args), indent=1)
        return 0
    from benchmarks.lib.engine_setup import model_path

    model = model_path(args.model)
    out = {"meta": {"command": command("whatif_check", list(argv or sys.argv[1:])),
                    "switchback": json.loads(SWITCHBACK.read_text())["meta"]
                    if SWITCHBACK.exists() else None},
           "exactness": exactness(model),
           # prediction() writes the costs files against_runs() reads
           "prediction": prediction(model) if SWITCHBACK.exists() else []}
    out["runs"] = against_runs(model) if RUNS.exists() else []
    write_json(Path(args.out), out, indent=1)
    Path(args.out).with_suffix(".md").write_text(markdown(out))
    print(markdown(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

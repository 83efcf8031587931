"""Paired benchmark: two configurations, both engines up at once, bursts interleaved in time.

    python -m benchmarks paired [--baseline none] [--candidate plugin] [--aa] [--quick]
                                [--workloads ...] [--concurrency 1 4 16 32] [--pairs 6]
                                [--max-tokens 40] [--model PATH] [--out DIR] [--name NAME]

Both engines (`paired/engine.py`, one process group each, started by `paired/engine_client.py`)
start together and stay up. For each workload x concurrency cell the harness sends the same
burst (the cell's N prompts in flight at once, N = concurrency, each running `--max-tokens`
tokens, greedy) to the engines in turn: one unmeasured warm-up burst each, then A B A B ... B A
(`--pairs` B bursts). Pair i's ratio is B_i's output tok/s over the mean of the two A bursts
around it, so a host that slows down or speeds up during the pair cancels out, and every burst
follows the other engine's burst (no burst gets the warm caches of running right after itself).
A cell reports the median ratio over its pairs and a 90% percentile-bootstrap interval of that
median, the median TPOT ratio, B's acceptance, whether B's greedy tokens matched A's, and per
pair the host's load average and the share of the CPU used by processes other than the
benchmark's own (psutil). `--aa` compares `none` with `none` (two engines, one config): its
intervals show the harness's resolution. Each cell is judged against issue 21's target
(`paired/targets.target`). Written to `--out` as NAME.json and NAME.md (every cell, misses
marked, the exact command) and NAME.png (`paired/report.py`).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.lib.engine_setup import ENGINE_DEFAULTS, model_path
from benchmarks.lib.results import RESULTS_DIR, command, vllm_version
from benchmarks.lib.workloads import EXTRA_WORKLOADS, LENGTHS, WORKLOADS, load_workload
from benchmarks.paired import report
from benchmarks.paired.configs import BASELINE, Configuration, by_name, unavailable_reason
from benchmarks.paired.engine_client import REPO, Engine, HostMeter, engine_env, placement
from benchmarks.paired.figures import burst_figures, cpu_ratio, summarize_cell, token_check
from benchmarks.paired.targets import target

FULL = {"concurrency": [1, 4, 16, 32], "pairs": 6, "max_tokens": 40,
        "workloads": list(WORKLOADS)}
QUICK = {"concurrency": [1, 4], "pairs": 2, "max_tokens": 16, "workloads": ["input_grounded"]}
WARMUP_TOKENS = 8
LABELS = ("A", "B")
"""The two engines: A the baseline, B the candidate."""


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline", default=BASELINE, help="configuration A (default none)")
    parser.add_argument("--candidate", default="plugin", help="configuration B")
    parser.add_argument("--aa", action="store_true", help="none against none (resolution)")
    parser.add_argument("--quick", action="store_true",
                        help="smoke run: input_grounded, concurrency 1 and 4, 2 pairs, 16 tokens")
    parser.add_argument("--model", help="a local checkpoint (default: SmolLM2-135M-Instruct, "
                        "built by benchmarks/smollm2.py)")
    parser.add_argument("--out", type=Path, default=RESULTS_DIR)
    parser.add_argument("--name", help="result file stem (default: A-vs-B, or aa)")
    parser.add_argument("--workloads", nargs="+", choices=WORKLOADS + EXTRA_WORKLOADS)
    parser.add_argument("--concurrency", type=int, nargs="+")
    parser.add_argument("--pairs", type=int, help="pairs per cell (default 6, quick 2)")
    parser.add_argument("--max-tokens", type=int, help="tokens per request (default 40)")
    parser.add_argument("--lengths", choices=LENGTHS, default="fixed",
                        help="output lengths: --max-tokens each, or uniform over max/5 to "
                             "9*max/5 per request, the same on both engines")
    parser.add_argument("--settle", type=float, default=1.2,
                        help="seconds between bursts: longer than the 1 s that vLLM's "
                        "shared-memory queues keep spinning after their last message, so the "
                        "idle engine's worker and scheduler are asleep when the other runs")
    parser.add_argument("--trace-dir", type=Path,
                        help="record the adaptive proposer's scored candidates here "
                        "(VLLM_SPECDEC_ADAPTIVE_TRACE, LABEL.trace.jsonl per engine)")
    parser.add_argument("--no-pin", dest="pin", action="store_false",
                        help="leave CPU placement to vLLM and the kernel (see `placement`)")
    parser.add_argument("--platform", default="cpu", help="the platform the engine runs on")
    parser.add_argument("--kv-cache-bytes", type=int,
                        default=ENGINE_DEFAULTS["kv_cache_memory_bytes"])
    parser.add_argument("--max-model-len", type=int, default=ENGINE_DEFAULTS["max_model_len"])
    parser.add_argument("--dtype", default="auto",
                        help="engine dtype (float32 makes greedy speculation bit-exact on CPU)")
    parser.add_argument("--compile", action="store_true", help="no enforce_eager")
    parser.add_argument("--timeout", type=float, default=900,
                        help="seconds for an engine to start or to answer one burst")
    return parser.parse_args(argv)


def plan(args: argparse.Namespace) -> dict[str, Any]:
    """The run's settings: the quick or full defaults, overridden by flags."""
    base: dict[str, Any] = dict(QUICK if args.quick else FULL)
    for key in ("concurrency", "pairs", "max_tokens", "workloads"):
        if getattr(args, key) is not None:
            base[key] = getattr(args, key)
    if base["pairs"] < 1:
        raise SystemExit("--pairs must be at least 1")
    a, b = (BASELINE, BASELINE) if args.aa else (args.baseline, args.candidate)
    base["configs"] = [a, b]
    base["kind"] = "aa" if a == b else ("null" if b.startswith("null") else b)
    base["name"] = args.name or ("aa" if a == b else f"{a}-vs-{b}")
    base["lengths"] = args.lengths
    return base


def cell_prompts(workload: dict[str, Any], concurrency: int, offset: int) -> list[dict[str, Any]]:
    """A cell's prompts: the next `concurrency` prompts of the workload after `offset` (cells
    walk on through the workload); every burst of the cell, on both engines, sends these."""
    prompts = workload["prompts"]
    return [prompts[(offset + i) % len(prompts)] for i in range(concurrency)]


def llm_kwargs(args: argparse.Namespace, model: str, config: Configuration,
               max_seqs: int) -> dict[str, Any]:
    kwargs: dict[str, Any] = {
        "model": model, "enforce_eager": not args.compile, "seed": ENGINE_DEFAULTS["seed"],
        "kv_cache_memory_bytes": args.kv_cache_bytes, "max_model_len": args.max_model_len,
        "max_num_seqs": max_seqs, "disable_log_stats": False, "dtype": args.dtype,
    }
    if config.speculative_config is not None:
        kwargs["speculative_config"] = dict(config.speculative_config)
    return kwargs


def run_cell(engines: list[Engine], workload: dict[str, Any], concurrency: int, offset: int,
             pairs: int, max_tokens: int, settle: float, meter: HostMeter,
             lengths: str = "fixed") -> list[dict[str, Any]]:
    """A warm-up burst on each engine, then A B A B ... A: `pairs` B bursts, each between two
    A bursts. Every burst sends the cell's same prompts (so after the warm-up both engines find
    their prefixes cached alike, and each burst does the same work).

    Every burst follows the other engine's burst (a burst right after its own engine's is
    faster: warm caches, awake threads), and pair i's ratio is B_i's tok/s over the mean of
    A_i's and A_(i+1)'s, which cancels a host that drifts linearly over the pair.
    """
    name = workload["name"]
    a_engine, b_engine = engines
    prompts = cell_prompts(workload, concurrency, offset)

    def burst(engine: Engine, index: int, tokens: int = max_tokens) -> dict[str, Any]:
        time.sleep(settle)
        cell = {"workload": name, "concurrency": concurrency,
                "tag": f"{name}-c{concurrency}-p{index}-{engine.label}",
                "prompts": prompts, "lengths": lengths}
        return engine.burst(cell, tokens)

    burst(a_engine, -1, WARMUP_TOKENS)
    burst(b_engine, -1, WARMUP_TOKENS)
    out = []
    load, mark = os.getloadavg()[0], meter.start()
    before = burst(a_engine, 0)
    for index in range(pairs):
        b_raw = burst(b_engine, index)
        after = burst(a_engine, index + 1)
        a_before, b, a_after = (burst_figures(r) for r in (before, b_raw, after))
        a_rates = [f["output_tokens_per_s"] for f in (a_before, a_after)]
        a_tpots = [f["tpot_ms_median"] for f in (a_before, a_after)]
        a_rate = sum(a_rates) / 2 if all(a_rates) else None
        a_tpot = sum(a_tpots) / 2 if all(a_tpots) else None
        out.append({
            "pair": index, "a": {**a_before, "output_tokens_per_s": a_rate,
                                 "tpot_ms_median": a_tpot, "before_after_tok_s": a_rates},
            "b": b,
            "ratio": b["output_tokens_per_s"] / a_rate if a_rate and b["output_tokens_per_s"]
            else None,
            "tpot_ratio": b["tpot_ms_median"] / a_tpot if a_tpot and b["tpot_ms_median"]
            else None,
            "cpu_ratio": cpu_ratio(a_before, b, a_after),
            "load_average": round(load, 2),
            "foreign_cpu_share": round(meter.foreign_share(mark), 3),
            "mismatches": token_check(before["requests"], b_raw["requests"]),
            "b_ids": [r["id"] for r in b_raw["requests"]]})
        print(f"[bench]   pair {index}: A {a_rates[0]:.2f} / {a_rates[1]:.2f} tok/s, "
              f"B {b['output_tokens_per_s']:.2f} tok/s, ratio {out[-1]['ratio']:.3f}, "
              f"CPU-time ratio {out[-1]['cpu_ratio']:.3f}", flush=True)
        load, mark, before = os.getloadavg()[0], meter.start(), after
    return out


def plugin_decision(model: str, config: Configuration, platform_name: str) -> dict[str, Any]:
    """`vllm-specdec explain` under this configuration's env: the plugin's decision as JSON."""
    cmd = [sys.executable, "-m", "vllm_specdec_plugin.cli", "explain", "--model", model,
           "--platform", platform_name]
    done = subprocess.run(cmd, capture_output=True, text=True, env=engine_env(config),
                          cwd=REPO, timeout=300, check=False)
    try:
        decision: dict[str, Any] = json.loads(done.stdout)
    except json.JSONDecodeError:
        return {"error": f"explain rc={done.returncode}: {done.stderr[-2000:]}"}
    return decision


def configurations(names: list[str], platform_name: str) -> list[Configuration]:
    known = {c.name: c for c in by_name([n for n in names if n != BASELINE])}
    chosen = [known[name] for name in names]
    for config in chosen:
        reason = unavailable_reason(config, platform_name)
        if reason is not None:
            raise SystemExit(f"{config.name}: cannot run here ({reason})")
    return chosen


def configuration_info(configs: list[Configuration], model: str,
                       platform_name: str) -> dict[str, Any]:
    """Per label (A, B): the configuration as requested, and the plugin's decision where the
    plugin decides."""
    info: dict[str, Any] = {}
    for label, config in zip(LABELS, configs, strict=True):
        info[label] = {"name": config.name, "description": config.description,
                       "requested_speculative_config": config.speculative_config,
                       "env": dict(config.env)}
        if config.uses_plugin and config.speculative_config is None:  # the plugin decides
            info[label]["decision"] = plugin_decision(model, config, platform_name)
    return info


def measure(engines: list[Engine], workloads: list[dict[str, Any]], conf: dict[str, Any],
            settle: float) -> list[dict[str, Any]]:
    """Every workload x concurrency cell, in order: its pairs, summary and target."""
    cells: list[dict[str, Any]] = []
    meter = HostMeter(engines)
    for workload in workloads:
        offset = 0
        for concurrency in conf["concurrency"]:
            pairs = run_cell(engines, workload, concurrency, offset, conf["pairs"],
                             conf["max_tokens"], settle, meter, conf["lengths"])
            offset += concurrency
            summary = summarize_cell(pairs)
            cells.append({"workload": workload["name"], "concurrency": concurrency,
                          **summary, **target(conf["kind"], workload["name"],
                                              {**summary, "concurrency": concurrency},
                                              conf["configs"][0]),
                          "pair_records": pairs})
            print(f"[bench] {workload['name']} c={concurrency}: ratio "
                  f"{summary['ratio_median']:.3f} {summary['ratio_interval']}", flush=True)
    return cells


def engine_record(engine: Engine) -> dict[str, Any]:
    """What a stopped engine left: the plugin's own log lines (decision, patches, zero-draft
    shortcuts seen working) and the adaptive proposer's own counters."""
    record: dict[str, Any] = {"plugin_log": [
        line for line in engine.log.read_text(errors="replace").splitlines()
        if "specdec" in line or "speculative decoding" in line][:200]}
    if engine.adaptive_stats.exists():
        with contextlib.suppress(ValueError):
            record["adaptive_stats"] = json.loads(engine.adaptive_stats.read_text())
    return record


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    conf = plan(args)
    started = time.perf_counter()
    model = str(Path(args.model).resolve()) if args.model else model_path()
    workloads = [load_workload(name) for name in conf["workloads"]]
    configs = configurations(conf["configs"], args.platform)
    info = configuration_info(configs, model, args.platform)
    load_start = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="specdec-bench-") as tmp:
        max_seqs = max(conf["concurrency"])
        print(f"[bench] starting {configs[0].name} and {configs[1].name}", flush=True)
        pin = placement(sorted(os.sched_getaffinity(0))) if args.pin else None
        engines = [Engine(label, config, {"llm": llm_kwargs(args, model, config, max_seqs)},
                          Path(tmp), args.timeout, pin, args.trace_dir)
                   for label, config in zip(LABELS, configs, strict=True)]
        try:
            for engine in engines:
                engine.ready = engine.answer()
                info[engine.label].update(startup_s=engine.ready["startup_s"],
                                          resolved=engine.ready["resolved"])
            cells = measure(engines, workloads, conf, args.settle)
        finally:
            for engine in engines:
                engine.stop()
                info[engine.label].update(engine_record(engine))
    result = {
        "meta": {"name": conf["name"], "kind": conf["kind"], "configs": conf["configs"],
                 "model": model,
                 "command": command("paired", argv),
                 "quick": args.quick, "max_tokens": conf["max_tokens"],
                 "lengths": conf["lengths"],
                 "pairs": conf["pairs"], "concurrency": conf["concurrency"],
                 "workloads": conf["workloads"], "settle_s": args.settle,
                 "placement": None if pin is None else {"worker_cpus": pin[0],
                                                        "frontend_cpus": sorted(pin[1])},
                 "platform": args.platform, "vllm_version": vllm_version(),
                 "cpu_count": os.cpu_count(), "python": platform.python_version(),
                 "enforce_eager": not args.compile, "kv_cache_bytes": args.kv_cache_bytes,
                 "dtype": args.dtype, "load_average_start": list(load_start),
                 "load_average_end": list(os.getloadavg()),
                 "wall_s": time.perf_counter() - started},
        "workload_descriptions": {w["name"]: w["description"] for w in workloads},
        "configurations": info,
        "cells": cells,
    }
    for path in report.write(result, args.out):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())

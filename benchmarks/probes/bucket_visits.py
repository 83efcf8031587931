"""The schedule controller step by step in closed batches of drawn lengths: how long each visit
to a batch bucket lasts, how many steps ran at a k other than their block's (the lookup a step
late), and what each bucket paired.

    python -m benchmarks bucket_visits [--workload multi_turn] [--concurrency 16]
        [--seconds 60] [--tokens 96] [--out FILE]

One in-process engine opted in (the controller on, fresh); closed batches of `--concurrency`
prompts of the workload, each request's output length drawn around `--tokens` (`--lengths
uniform` of `run_pairs`), served back to back for `--seconds`, the controller alone, as in
`run_pairs`' warm-up. Every step the controller takes is recorded, with the bucket's state after
it. Written to find why the controller hardly pairs in such batches
(docs/schedule-controller.md, "Steady state at c=16 and c=32 with output lengths drawn per
request"). It times the engine: run it alone on the host.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from benchmarks.lib.engine_setup import start_llm
from benchmarks.lib.results import RESULTS_DIR, command, vllm_version, write_json
from benchmarks.lib.workloads import output_lengths, workload_token_ids


def record(controller: Any) -> list[tuple[Any, ...]]:
    """Wrap the controller's `observe`: per step (batch, the step's k, clean, the bucket's
    block k after it, its incumbent, its pairs so far, its unpaired explorations, and the
    step's seconds, tokens and drafts: what `observe` was given, so that the run can be
    replayed into a controller of one's own, `benchmarks/probes/pair_noise.py`)."""
    steps: list[tuple[Any, ...]] = []
    observe = controller.observe

    def recorded(step: Any) -> Any:
        change = observe(step)
        state = controller.buckets.get(step[0].bit_length())
        steps.append((step[0], step[1], step[5]) + ((None,) * 4 if state is None else (
            state.block.arm, state.incumbent, sum(a.pairs for a in state.arms.values()),
            state.unpaired)) + (step[2], step[3], step[4]))
        return change

    controller.observe = recorded
    return steps


def summary(steps: list[tuple[Any, ...]]) -> dict[str, Any]:
    """Per bucket: its visits' lengths in steps (a visit: consecutive steps in the bucket),
    the steps in it that ran at a k other than the block's (after the bucket's first), its
    changes of k inside a visit (each step at a new k is unsettled), pairs and unpaired
    explorations at the end, and over the run its pairs completed (`paired`: the pairs count
    rising, or falling, as a switch or a changed arm restarts it at the pair that did so) and
    its switches (changes of incumbent)."""
    from vllm_specdec_plugin.core.step_cost import bucket_label

    buckets: dict[str, dict[str, Any]] = {}
    previous, previous_k = None, -1
    for batch, k, _, arm, incumbent, pairs, unpaired, *_ in steps:
        label = bucket_label(batch.bit_length())
        found = buckets.setdefault(label, {"visits": [], "steps": 0, "off_block": 0,
                                           "k_changes": 0, "paired": 0, "switches": 0})
        if label != previous:
            found["visits"].append(0)
        found["visits"][-1] += 1
        found["steps"] += 1
        if arm is not None and label == previous and k != arm:
            found["off_block"] += 1
        if label == previous and k != previous_k:
            found["k_changes"] += 1
        if arm is not None and "pairs" in found:
            before = found["pairs"]
            found["paired"] += pairs - before if pairs >= before else 1
            found["switches"] += incumbent != found["incumbent"]
        if arm is not None:
            found.update(pairs=pairs, unpaired=unpaired, incumbent=incumbent)
        previous, previous_k = label, k
    return buckets


def arms_at_end(state: Any) -> dict[str, dict[str, float]]:
    """Each arm of a bucket at the end, against its incumbent: pairs since its last reset, the
    decayed mean gain (`core/pair_price.py` `pair_gain`; `log_gain`, the mean log ratio, in
    runs before pairs were rate differences), its bounds at the "clearly worse" level
    (1 - `back_off`) and its exploration gap in incumbent blocks."""
    from vllm_specdec_plugin.core.schedule_params import CONTROLLER_DEFAULTS

    level = 1.0 - CONTROLLER_DEFAULTS.back_off
    return {f"k{k}": {"pairs": arm.pairs, "gain": round(arm.gain, 4),
                      "low": round(arm.bounds(level)[0], 4),
                      "high": round(arm.bounds(level)[1], 4), "gap": arm.gap}
            for k, arm in sorted(state.arms.items()) if k != state.incumbent}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workload", default="multi_turn")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--tokens", type=int, default=96)
    parser.add_argument("--out", default=str(RESULTS_DIR / "bucket-visits.json"))
    args = parser.parse_args(argv)
    from vllm import SamplingParams

    from benchmarks.probes.schedule_switchback import runtime_of
    from vllm_specdec_plugin.core.step_cost import bucket_label

    llm = start_llm(None, max(32, args.concurrency),
                    env={"KAITO_ENABLE_SPECULATIVE_DECODING": "true"}, disable_log_stats=False)
    runtime = runtime_of(llm)
    steps = record(runtime.controller)
    count = 10 * args.concurrency
    prompts = [{"prompt_token_ids": ids}
               for ids in workload_token_ids(llm.get_tokenizer(), args.workload, count)]
    params = [SamplingParams(max_tokens=n, temperature=0.0, ignore_eos=True)
              for n in output_lengths("uniform", args.tokens, count)]
    end, runs = time.perf_counter() + args.seconds, 0
    while time.perf_counter() < end:
        at = slice((runs % 10) * args.concurrency, (runs % 10 + 1) * args.concurrency)
        llm.generate(prompts[at], params[at], use_tqdm=False)
        runs += 1
    runtime.drain()
    buckets = summary(steps)
    for key, state in runtime.controller.buckets.items():
        buckets.setdefault(bucket_label(key), {})["arms"] = arms_at_end(state)
    out = {"meta": {"kind": "bucket-visits",
                    "command": command("bucket_visits", list(argv or sys.argv[1:])),
                    "vllm": vllm_version(), "workload": args.workload,
                    "concurrency": args.concurrency, "tokens": args.tokens,
                    "lengths": "uniform", "runs": runs, "prior": list(runtime.prior),
                    "k_set": list(runtime.k_set), "max_graph_tokens": runtime.graph_tokens,
                    "controller_params": asdict(runtime.controller.params)},
           "steps": len(steps), "off_block": sum(b["off_block"] for b in buckets.values()),
           "k_changes": sum(b["k_changes"] for b in buckets.values()),
           "lookup_lag_steps": runtime.controller.lag,
           "buckets": buckets,
           "trace_columns": ["batch", "k", "clean", "block_k", "incumbent", "pairs",
                             "unpaired", "seconds", "tokens", "drafted"],
           "trace": steps}
    write_json(Path(args.out), out, indent=None)
    print({label: {key: b[key] for key in ("steps", "off_block", "k_changes", "pairs",
                                           "unpaired", "paired", "switches")
                             if key in b}
           | {"visits": b.get("visits", [])[:12], "arms": b.get("arms")}
           for label, b in buckets.items()})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

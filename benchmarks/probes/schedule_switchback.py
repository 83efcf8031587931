"""k against k=0 inside one engine: the schedule controller's switchback arms, cell by cell.

    python -m benchmarks schedule_switchback [--cells SPEC] [--warmup 15] [--seconds 45]
        [--tokens 160] [--steady | --draining] [--model PATH] [--no-log-stats] [--out FILE]

One real `LLM()` with the engine core in this process (`lib/engine_setup.start_llm`), opted in
(`KAITO_ENABLE_SPECULATIVE_DECODING=true`: the plugin's default n-gram fallback with its
load-aware schedule, and the schedule controller). A cell is (workload, concurrency, arms): the
controller's runtime on the live scheduler is restarted (`ControlledScheduler.restart`: a fresh
controller, the lookup back to the table), the controller alone serves the cell's traffic for
`--warmup` seconds (not measured: a serving engine's controller has long learned its traffic),
then the switchback arms run on the same controller: batches of `concurrency` prompts of the
workload decode `--tokens` tokens each (ignore_eos, greedy) until `--seconds` have passed, so
every decode step runs at that batch size. The two arms alternate in
blocks of settled decode steps within the engine (`core/switchback.py`); the cell's figure is
the median of each second-arm block's tokens/s over the mean of the first-arm blocks beside it,
with its 90% bootstrap interval, and the throughput ratio of the two arms over the same pairs
(total tokens over total seconds, with its own interval), for the batch bucket of the
concurrency. Arms: k<N>, static
(the fixed table), controller. Also recorded: the controller's table after the cell, its own
cost per step, the blocks per arm. The engine makes vLLM's per-step stats as `vllm serve` does
(`disable_log_stats=False`; the controller then counts a step in O(1) from vLLM's spec-decoding
stats); `--no-log-stats` runs it as the offline `LLM()` default does (the controller walks the
step's drafts and sampled rows). `--steady`: instead of closed batches of one length, a queue
with `concurrency` requests in flight, each finished one replaced at once, output lengths drawn
per request around `--tokens` (`workloads.output_lengths`, "uniform"), so requests end at most
steps at a large batch, as in steady serving (the cell records how many ended per step), and
most steps have a refilled request's prefill in them. `--draining`: closed batches of requests
of those drawn lengths, so requests end at most steps and nothing refills them: most such steps
are decode only, the case in which the tokens vLLM emitted are counted from the step's sampled
rows (`schedule_runtime.counted`).

--cells: ";"-separated "workload:concurrency:armA,armB" (default: the A/A, open-ended and
input-grounded cells of docs/schedule-controller.md). Prints `SWITCHBACK {json}`; writes --out.
Run it alone on the host.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
from collections.abc import Sequence
from typing import Any

from benchmarks.lib.engine_setup import start_llm
from benchmarks.lib.results import command, vllm_version, write_json
from benchmarks.lib.workloads import output_lengths, workload_token_ids

DEFAULT_CELLS = ";".join([
    *(f"open_ended:{c}:k0,k0" for c in (1, 4, 16, 32)),
    *(f"{w}:{c}:k0,controller" for w in ("open_ended", "mt_bench") for c in (1, 4, 16, 32)),
    *(f"{w}:{c}:k0,controller" for w in ("input_grounded", "multi_turn") for c in (1, 4)),
    *(f"{w}:{c}:k5,controller" for w in ("input_grounded", "multi_turn") for c in (1, 4)),
    "open_ended:16:k5,controller", "open_ended:32:k5,controller", "mixed:32:k0,controller",
])


def parse_cells(text: str) -> list[tuple[str, int, str]]:
    cells = []
    for part in filter(None, (p.strip() for p in text.split(";"))):
        workload, concurrency, arms = part.split(":")
        cells.append((workload, int(concurrency), arms))
    return cells


def runtime_of(llm: Any) -> Any:
    from vllm_specdec_plugin.engine.changes import core_sched_scheduler

    scheduler = llm.llm_engine.engine_core.engine_core.scheduler
    runtime = core_sched_scheduler.runtime_of(scheduler)
    if runtime is None:
        raise SystemExit("no schedule controller on this engine: is the plugin installed, "
                         "opted in, and VLLM_SPECDEC_SCHEDULE=on?")
    return runtime


def serve(llm: Any, prompts: list[Any], params: Any, concurrency: int, seconds: float,
          ended: list[int] | None = None) -> int:
    """Batches of `concurrency` prompts until `seconds` have passed (`params`: one for every
    request, or a list cycled with the prompts); the tokens generated. Adds the requests that
    ended to `ended[0]`."""
    start, index, generated = time.perf_counter(), 0, 0
    while time.perf_counter() - start < seconds:
        batch = [prompts[(index + i) % len(prompts)] for i in range(concurrency)]
        each = [params[(index + i) % len(params)] for i in range(concurrency)] \
            if isinstance(params, list) else params
        index += concurrency
        outputs = llm.generate(batch, each, use_tqdm=False)
        generated += sum(len(o.outputs[0].token_ids) for o in outputs)
        if ended is not None:
            ended[0] += len(outputs)
    return generated


REQUEST_IDS = itertools.count()


def serve_queue(llm: Any, prompts: list[Any], params: list[Any], concurrency: int,
                seconds: float, ended: list[int]) -> int:
    """`concurrency` requests in flight, each finished one replaced by the next (prompts and
    `params` cycling) until `seconds` have passed, then drained; the tokens generated. Adds the
    requests that ended to `ended[0]`."""
    engine, start, sent, in_flight, generated = llm.llm_engine, time.perf_counter(), 0, 0, 0

    def send() -> None:
        nonlocal sent, in_flight
        engine.add_request(f"steady-{next(REQUEST_IDS)}", prompts[sent % len(prompts)],
                           params[sent % len(params)])
        sent, in_flight = sent + 1, in_flight + 1

    while in_flight < concurrency:
        send()
    while engine.has_unfinished_requests():
        for output in engine.step():
            if output.finished:
                in_flight -= 1
                ended[0] += 1
                generated += len(output.outputs[0].token_ids)
                if time.perf_counter() - start < seconds:
                    send()
    return generated


def run_cell(llm: Any, tokenizer: Any, workload: str, concurrency: int, arms: str,
             warmup: float, seconds: float, tokens: int, traffic: str = "batches"
             ) -> dict[str, Any]:
    from vllm import SamplingParams

    from vllm_specdec_plugin.core.step_cost import bucket, bucket_label

    runtime = runtime_of(llm)
    prompts = [{"prompt_token_ids": ids}
               for ids in workload_token_ids(tokenizer, workload, 64)]
    params = SamplingParams(max_tokens=tokens, temperature=0.0, ignore_eos=True)
    ended = [0]
    each = [SamplingParams(max_tokens=n, temperature=0.0, ignore_eos=True)
            for n in output_lengths("uniform", tokens, 4 * len(prompts))]

    def serve_for(seconds: float) -> int:
        if traffic == "steady":
            return serve_queue(llm, prompts, each, concurrency, seconds, ended)
        return serve(llm, prompts, each if traffic == "draining" else params, concurrency,
                     seconds, ended)

    runtime.restart(None)
    before = runtime.steps, runtime.own_s, snapshot_seconds(runtime), runtime.decisions.seconds
    serve_for(warmup)
    alone_steps, alone_ended = runtime.steps - before[0], ended[0]
    runtime.drain()  # the decision thread's last steps
    learned = {bucket_label(k): v for k, v in runtime.controller.table().items()}
    alone = cost_per_step(runtime, before)
    runtime.restart(arms, fresh=False)
    before = runtime.steps, runtime.own_s, snapshot_seconds(runtime), runtime.decisions.seconds
    start = time.perf_counter()
    generated = serve_for(seconds)
    runtime.drain()
    report = runtime.switchback.report()
    label = bucket_label(bucket(concurrency))
    return {"workload": workload, "concurrency": concurrency, "arms": arms.split(","),
            "bucket": label, "cell": report["buckets"].get(label),
            "seconds": round(time.perf_counter() - start, 1), "generated_tokens": generated,
            "table_after_warmup": learned,
            "table": {bucket_label(k): v for k, v in runtime.controller.table().items()},
            "cost_us_per_step": {"controller_alone": alone,
                                 "with_switchback": cost_per_step(runtime, before)},
            **({"requests_ended_per_step": {
                "controller_alone": round(alone_ended / max(alone_steps, 1), 3),
                "with_switchback": round((ended[0] - alone_ended)
                                         / max(runtime.steps - before[0], 1), 3)}}
               if traffic != "batches" else {})}


def snapshot_seconds(runtime: Any) -> float:
    """Seconds the snapshot writer's thread spent (off the engine thread)."""
    return runtime.writer.seconds if runtime.writer is not None else 0.0


def cost_per_step(runtime: Any, before: tuple[int, float, float, float]
                  ) -> dict[str, float] | None:
    """The controller's own microseconds per engine step since `before` (steps, per-step
    seconds, snapshot seconds, decision seconds): its per-step path on the engine thread
    (`ControlledScheduler.own_s`), and spread over the steps its decision thread's
    (`decisions.seconds`) and the snapshot writer's thread's."""
    steps = runtime.steps - before[0]
    if not steps:
        return None
    return {"steps": steps, "per_step_path": round(1e6 * (runtime.own_s - before[1]) / steps, 2),
            "decision_thread": round(1e6 * (runtime.decisions.seconds - before[3]) / steps, 2),
            "snapshot_thread": round(1e6 * (snapshot_seconds(runtime) - before[2]) / steps, 2)}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cells", default=DEFAULT_CELLS)
    parser.add_argument("--warmup", type=float, default=15.0,
                        help="per cell: the controller alone, not measured")
    parser.add_argument("--seconds", type=float, default=45.0, help="per cell, measured")
    parser.add_argument("--tokens", type=int, default=160, help="per request")
    traffic = parser.add_mutually_exclusive_group()
    traffic.add_argument("--steady", action="store_true",
                         help="a queue of requests with output lengths drawn per request")
    traffic.add_argument("--draining", action="store_true",
                         help="closed batches of requests with output lengths drawn per request")
    parser.add_argument("--model", help="a checkpoint directory (default: SmolLM2-135M)")
    parser.add_argument("--no-log-stats", action="store_true",
                        help="no per-step stats (the offline LLM() default)")
    parser.add_argument("--out", help="also write the JSON result here")
    args = parser.parse_args(argv)
    try:
        cells = parse_cells(args.cells)
    except ValueError:
        parser.error(f"--cells {args.cells!r}: give workload:concurrency:armA,armB;...")
    kind = "steady" if args.steady else "draining" if args.draining else "batches"
    llm = start_llm(args.model, max(32, *(c for _, c, _ in cells)),
                    env={"KAITO_ENABLE_SPECULATIVE_DECODING": "true"},
                    disable_log_stats=args.no_log_stats)
    tokenizer = llm.get_tokenizer()
    results = []
    for workload, concurrency, arms in cells:
        result = run_cell(llm, tokenizer, workload, concurrency, arms, args.warmup,
                          args.seconds, args.tokens, kind)
        results.append(result)
        print("CELL", json.dumps(result), flush=True)
    out = {"meta": {"kind": "switchback",
                    "command": command("schedule_switchback", list(argv or sys.argv[1:])),
                    "vllm": vllm_version(), "warmup_per_cell": args.warmup,
                    "seconds_per_cell": args.seconds,
                    "tokens_per_request": args.tokens, "traffic": kind,
                    "log_stats": not args.no_log_stats}, "cells": results}
    print("SWITCHBACK", json.dumps(out))
    if args.out:
        from pathlib import Path

        write_json(Path(args.out), out, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

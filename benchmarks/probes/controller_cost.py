"""The schedule controller's own cost per engine step at batch 1, 32 and 256, on vLLM's scheduler.

    python -m benchmarks controller_cost [--batches 1,32,256] [--steps 400] [--rounds 5]
        [--model PATH] [--out FILE]

No model and no forward pass: vLLM's real `Scheduler` (the installed release's), built from the
plugin's opted-in default config (`EngineArgs`, the n-gram fallback with its load-aware schedule,
so the `schedule-controller` change wraps it), with a KV cache config of its own, driven as the
engine core drives it: `schedule()`, a model runner output (1 + a random number of the step's
drafts accepted per row), `update_from_output()`, the drafts handed back, then a wait until the
controller's decision thread has taken the step (as it would while the device steps; so that
thread never holds the GIL inside the next step's timed path). The controller times its own
per-step path on the engine thread (`ControlledScheduler.own_s`: the `update_from_output`
wrapper's, with `time.perf_counter`); the figure is those seconds over the steps, per batch and
per way of counting:

- `stats`: the scheduler makes vLLM's per-step stats (`log_stats`, `vllm serve`'s default) and
  the controller counts a step from its spec-decoding stats (O(1));
- `walk`: no stats (`--disable-log-stats`, the offline `LLM()` default): one pass over the
  step's drafts and one over its sampled rows.

Rounds alternate the two ways per batch (stats, walk, walk, stats, ...) and the median over
rounds is reported with every round. The loop keeps the interpreter's caches warm, as an engine
step does not (docs/schedule-controller.md gives the in-engine figure beside it). Run it alone.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time
from collections.abc import Sequence
from typing import Any

from benchmarks.lib.engine_setup import model_path
from benchmarks.lib.results import command, vllm_version, write_json


def build(model: str, batch: int, log_stats: bool) -> Any:
    import torch
    from vllm.engine.arg_utils import EngineArgs
    from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
    from vllm.v1.structured_output import StructuredOutputManager

    config = EngineArgs(model=model, max_num_seqs=max(batch, 16), max_model_len=8192,
                        enforce_eager=True, enable_prefix_caching=False,
                        max_num_batched_tokens=max(8192, 8 * batch)).create_engine_config()
    blocks = batch * 8192 // 16 + 16
    config.cache_config.num_gpu_blocks = blocks
    spec = FullAttentionSpec(block_size=16, num_kv_heads=1, head_size=8, dtype=torch.float32)
    kv = KVCacheConfig(num_blocks=blocks, kv_cache_tensors=[],
                       kv_cache_groups=[KVCacheGroupSpec(["layer.0"], spec)])
    cls = config.scheduler_config.get_scheduler_cls()
    return cls(vllm_config=config, kv_cache_config=kv, block_size=16, log_stats=log_stats,
               structured_output_manager=StructuredOutputManager(config))


def measure(model: str, batch: int, log_stats: bool, steps: int, seed: int) -> dict[str, Any]:
    """The controller's µs per step over `steps` decode steps after a warm-up of 30."""
    from vllm import SamplingParams
    from vllm.v1.outputs import DraftTokenIds, ModelRunnerOutput
    from vllm.v1.request import Request

    sched = build(model, batch, log_stats)
    params = SamplingParams(max_tokens=8000, temperature=0.0, ignore_eos=True)
    for i in range(batch):
        sched.add_request(Request(request_id=f"r{i}", prompt_token_ids=[1 + i % 97, 2, 3, 4] * 4,
                                  sampling_params=params, pooling_params=None))
    rng = random.Random(seed)
    runtime = None
    before = (0, 0.0)
    for step in range(30 + steps):
        out = sched.schedule()
        ids = list(out.num_scheduled_tokens)
        spec = out.scheduled_spec_decode_tokens
        sampled = [[7] + [8] * rng.randint(0, len(spec.get(r, ()))) for r in ids]
        sched.update_from_output(out, ModelRunnerOutput(
            req_ids=ids, req_id_to_index={r: i for i, r in enumerate(ids)},
            sampled_token_ids=sampled))
        sched.update_draft_token_ids(DraftTokenIds(ids, [[9] * sched.num_spec_tokens
                                                         for _ in ids]))
        runtime = sched.__dict__.get("_specdec_schedule_runtime")
        if runtime is not None:
            # the decision thread takes the step while the engine waits on the device (here:
            # at once, so it never holds the GIL inside the next step's timed path)
            runtime.drain()
        if step == 29 and runtime is not None:
            before = (runtime.steps, runtime.own_s)
    if runtime is None:
        raise SystemExit("no schedule controller on this scheduler: is the plugin installed?")
    counted = runtime.steps - before[0]
    return {"us_per_step": 1e6 * (runtime.own_s - before[1]) / counted, "steps": counted,
            "uses_stats": runtime.log_stats, "batch_seen": len(ids)}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", default="1,32,256")
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--model", help="a checkpoint directory (default: SmolLM2-135M)")
    parser.add_argument("--out", help="also write the JSON result here")
    args = parser.parse_args(argv)
    os.environ["KAITO_ENABLE_SPECULATIVE_DECODING"] = "true"
    import vllm.platforms as platforms
    from vllm.platforms.cpu import CpuPlatform

    platforms._current_platform = CpuPlatform()
    from vllm_specdec_plugin.engine import registry

    registry.apply_changes("opted-in", announce=False)
    model = model_path(args.model)
    cells = []
    for batch in (int(b) for b in args.batches.split(",")):
        rounds: dict[str, list[float]] = {"stats": [], "walk": []}
        for index in range(args.rounds):
            order = ("stats", "walk") if index % 2 == 0 else ("walk", "stats")
            for way in order:
                found = measure(model, batch, way == "stats", args.steps, seed=index)
                assert found["uses_stats"] == (way == "stats") and found["batch_seen"] == batch
                rounds[way].append(round(found["us_per_step"], 2))
        cell = {"batch": batch, **{f"{way}_median_us": statistics.median(values)
                                   for way, values in rounds.items()}, "rounds_us": rounds}
        cells.append(cell)
        print("CELL", json.dumps(cell), flush=True)
    out = {"meta": {"kind": "controller_cost",
                    "command": command("controller_cost", list(argv or sys.argv[1:])),
                    "vllm": vllm_version(), "steps_per_round": args.steps,
                    "date": time.strftime("%Y-%m-%d")}, "cells": cells}
    if args.out:
        from pathlib import Path

        write_json(Path(args.out), out, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

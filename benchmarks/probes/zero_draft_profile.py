"""Where a zero-draft step's time goes: one in-process engine, its step's parts timed.

    python -m benchmarks zero_draft_profile --config {none,idle,null} [--batch 32]
        [--max-tokens 64] [--repeats 3] [--cprofile FILE] [--plugin-shortcuts]

Starts `LLM()` with the engine core in this process (`lib/engine_setup.start_llm`), then
wraps the parts of a step with timers (`lib/timers.py`, inclusive): the engine step, the
scheduler, the model runner's input preparation (`_prepare_inputs`, `_calc_spec_decode_metadata`),
the forward pass, sampling (`Sampler` / `RejectionSampler`), bookkeeping, the proposer call and
output processing. A batch of `--batch` open-ended prompts (greedy, ignore_eos) runs `--repeats`
times; it prints one JSON line with µs per step for each part (median over repeats) and the
wall time. Configurations: `none` (no speculative config), `idle` (ngram k=5 whose schedule
drafts 0 tokens at every batch size: what the plugin's default runs at batch 32), `null` (a
`custom_class` proposer that never drafts, `benchmarks/lib/null_proposer.py`).
`--plugin-shortcuts` applies the plugin's zero-draft shortcuts
(`registry.ZERO_DRAFT_SHORTCUTS` in `vllm_specdec_plugin/engine/registry.py`)
before the engine starts, as an opted-in engine would.

    python -m benchmarks zero_draft_profile --micro [--vocab 49152]

times the zero-draft parts alone, without an engine (one thread, best of 15 runs of 20 calls, µs
per call): sampling a zero-draft step with the plain `Sampler`, vLLM's `RejectionSampler` and the
patched one (greedy and seeded batches of 1/4/16/32 rows), `_calc_spec_decode_metadata` and
`NgramProposer.propose` at k=0 (32 rows of 300 tokens), vLLM's code against the patched code.
"""

from __future__ import annotations

import argparse
import cProfile
import functools
import hashlib
import json
import os
import pstats
import statistics
import sys
import time
from typing import Any

from benchmarks.lib.engine_setup import start_llm, use_in_process_engine
from benchmarks.lib.timers import Timers
from benchmarks.lib.workloads import workload_token_ids
from benchmarks.paired.configs import NGRAM_IDLE_SPEC, NULL_SPEC

SPECS: dict[str, dict[str, Any] | None] = {"none": None, "idle": NGRAM_IDLE_SPEC,
                                           "null": NULL_SPEC}


def instrument(llm: Any, timers: Timers) -> None:
    engine = llm.llm_engine
    core = engine.engine_core.engine_core
    runner = core.model_executor.driver_worker.worker.model_runner
    wrap = functools.partial(timers.wrap, optional=True)  # parts some releases lack
    wrap(engine, "step", "llm_engine.step (all)")
    wrap(engine.output_processor, "process_outputs", "output_processor")
    wrap(core, "step_fn", "engine_core.step")
    wrap(core, "post_step", "engine_core.post_step")
    wrap(core.scheduler, "schedule", "scheduler.schedule")
    wrap(core.scheduler, "update_from_output", "scheduler.update_from_output")
    wrap(core.scheduler, "update_draft_token_ids", "scheduler.update_draft_token_ids")
    for name in ("execute_model", "sample_tokens", "_update_states", "_prepare_inputs",
                 "_calc_spec_decode_metadata", "_model_forward", "_sample", "_bookkeeping_sync",
                 "propose_draft_token_ids", "take_draft_token_ids",
                 "_update_states_after_model_execute"):
        wrap(runner, name, f"runner.{name}")
    wrap(runner.sampler, "forward", "Sampler.forward")
    if getattr(runner, "rejection_sampler", None) is not None:
        wrap(runner.rejection_sampler, "forward", "RejectionSampler.forward")
    if getattr(runner, "drafter", None) is not None:
        wrap(runner.drafter, "propose", "drafter.propose")


def best_us(fn: Any, calls: int = 20, runs: int = 15) -> float:
    for _ in range(5):
        fn()
    best = float("inf")
    for _ in range(runs):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter() - start) / calls * 1e6)
    return round(best, 1)


def micro(vocab: int) -> dict[str, Any]:
    """The zero-draft parts alone: vLLM's code against the patched code (µs per call)."""
    import dataclasses
    import types

    import numpy as np
    import torch
    from vllm.platforms import current_platform

    current_platform.import_kernels()
    current_platform.register_triton_kernel_overrides()
    torch.set_num_threads(1)
    from vllm_specdec_plugin.engine import patching as vllm_patches
    from vllm_specdec_plugin.engine import registry
    from vllm_specdec_plugin.engine.changes.probing import (
        bare_ngram_proposer,
        probe_sampling_metadata,
        spec_metadata,
    )

    registry.apply_changes("opted-in", announce=False, names=registry.ZERO_DRAFT_SHORTCUTS)
    from vllm.v1.sample.rejection_sampler import RejectionSampler
    from vllm.v1.sample.sampler import Sampler
    from vllm.v1.spec_decode.ngram_proposer import NgramProposer
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    original = {name: vllm_patches._applied[name].original
                for name in registry.ZERO_DRAFT_SHORTCUTS}
    sampler = Sampler()
    rejection = RejectionSampler(sampler)
    out: dict[str, Any] = {"vocab": vocab}
    for rows in (1, 4, 16, 32):
        logits = torch.randn(rows, vocab).to(torch.bfloat16)
        meta = spec_metadata([0] * rows)
        greedy = probe_sampling_metadata(rows)
        seeded = dataclasses.replace(
            greedy, temperature=torch.full((rows,), 0.8), all_greedy=False, all_random=True,
            generators={i: torch.Generator().manual_seed(i) for i in range(rows)})
        for kind, sm in (("greedy", greedy), ("seeded", seeded)):
            out[f"sample {kind} B={rows}"] = {
                "Sampler": best_us(lambda sm=sm, lg=logits: sampler(lg, sm)),
                "RejectionSampler (vLLM)": best_us(
                    lambda sm=sm, lg=logits, m=meta: original["zero-draft-plain-sampler"](
                        rejection, m, None, lg, sm)),
                "RejectionSampler (patched)": best_us(
                    lambda sm=sm, lg=logits, m=meta: rejection(m, None, lg, sm))}
    fake = types.SimpleNamespace(arange_np=np.arange(8192),
                                 _arange_scratch=np.zeros(8192, dtype=np.int64),
                                 device=torch.device("cpu"),
                                 input_ids=types.SimpleNamespace(gpu=torch.zeros(8192,
                                                                                 dtype=torch.int32)))
    fake._get_cumsum_and_arange = functools.partial(GPUModelRunner._get_cumsum_and_arange, fake)
    drafts, cu = np.zeros(32, dtype=np.int32), np.cumsum(np.ones(32, dtype=np.int32))
    out["metadata B=32"] = {
        "vLLM": best_us(lambda: original["zero-draft-spec-metadata"](fake, drafts, cu)),
        "patched": best_us(lambda: GPUModelRunner._calc_spec_decode_metadata(fake, drafts, cu))}
    proposer = bare_ngram_proposer(NgramProposer, rows=32, min_n=4, max_model_len=2048)
    tokens = np.random.default_rng(0).integers(0, vocab, (32, 2048)).astype(np.int32)
    lengths = np.full(32, 300, dtype=np.int32)
    sampled = [[1]] * 32
    out["ngram propose k=0 B=32"] = {
        "vLLM": best_us(lambda: original["zero-draft-ngram-return"](proposer, 0, sampled,
                                                                    lengths, tokens)),
        "patched": best_us(lambda: proposer.propose(0, sampled, lengths, tokens))}
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", choices=sorted(SPECS))
    parser.add_argument("--micro", action="store_true", help="the zero-draft parts alone")
    parser.add_argument("--vocab", type=int, default=49152)
    parser.add_argument("--model")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--cprofile", help="write a cProfile of the last repeat here")
    parser.add_argument("--plugin-shortcuts", action="store_true")
    args = parser.parse_args(argv)
    if args.micro:
        print("MICRO " + json.dumps(micro(args.vocab)), flush=True)
        return 0
    if args.config is None:
        parser.error("--config is required (or --micro)")
    use_in_process_engine()
    from vllm import SamplingParams

    if args.plugin_shortcuts:
        from vllm_specdec_plugin.engine import registry

        registry.apply_changes("opted-in", announce=True, names=registry.ZERO_DRAFT_SHORTCUTS)
    kwargs: dict[str, Any] = {}
    spec = SPECS[args.config]
    if spec is not None:
        kwargs["speculative_config"] = dict(spec)
    llm = start_llm(args.model, args.batch, **kwargs)
    batch = workload_token_ids(llm.get_tokenizer(), "open_ended", args.batch)
    params = SamplingParams(temperature=0.0, max_tokens=args.max_tokens, ignore_eos=True)
    inputs = [{"prompt_token_ids": ids} for ids in batch]
    llm.generate(inputs, SamplingParams(temperature=0.0, max_tokens=8, ignore_eos=True),
                 use_tqdm=False)
    timers = Timers()
    instrument(llm, timers)
    per_repeat: list[dict[str, float]] = []
    walls = []
    profiler = cProfile.Profile() if args.cprofile else None
    tokens = None
    for index in range(args.repeats):
        timers.reset()
        last = profiler if index == args.repeats - 1 else None  # profiled: the last repeat
        if last is not None:
            last.enable()
        start = time.perf_counter()
        outputs = llm.generate(inputs, params, use_tqdm=False)
        walls.append(time.perf_counter() - start)
        if last is not None:
            last.disable()
        tokens = [list(o.outputs[0].token_ids) for o in outputs]
        steps = timers.calls.get("engine_core.step", 1)
        per_repeat.append({k: v / steps * 1e6 for k, v in timers.seconds.items()})
        per_repeat[-1]["steps"] = steps
    parts = {key: statistics.median(r.get(key, 0.0) for r in per_repeat)
             for key in per_repeat[0]}
    out = {"config": args.config, "batch": args.batch, "max_tokens": args.max_tokens,
           "shortcuts": args.plugin_shortcuts, "wall_s": walls,
           "tok_per_s": [args.batch * args.max_tokens / w for w in walls],
           "us_per_step": {k: round(v, 1) for k, v in sorted(parts.items())},
           "tokens_digest": hashlib.sha256(json.dumps(tokens).encode()).hexdigest()[:16],
           "load_average": os.getloadavg()[0]}
    if args.cprofile and profiler is not None:
        profiler.dump_stats(args.cprofile)
        stats = pstats.Stats(profiler, stream=sys.stderr)
        stats.sort_stats("tottime").print_stats(25)
    print("PROFILE " + json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

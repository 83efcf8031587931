"""Where a zero-draft step's time goes: one in-process engine, its step's parts timed.

    python -m benchmarks.zero_draft_profile --config {none,idle,null} [--batch 32]
        [--max-tokens 64] [--repeats 3] [--cprofile FILE] [--plugin-shortcuts]

Starts `LLM()` with the engine core in this process (VLLM_ENABLE_V1_MULTIPROCESSING=0), then
wraps the parts of a step with `time.perf_counter` timers (inclusive): the engine step, the
scheduler, the model runner's input preparation (`_prepare_inputs`, `_calc_spec_decode_metadata`),
the forward pass, sampling (`Sampler` / `RejectionSampler`), bookkeeping, the proposer call and
output processing. A batch of `--batch` open-ended prompts (greedy, ignore_eos) runs `--repeats`
times; it prints one JSON line with µs per step for each part (median over repeats) and the
wall time. Configurations: `none` (no speculative config), `idle` (ngram k=5 whose schedule
drafts 0 tokens at every batch size: what the plugin's default runs at batch 32), `null` (a
`custom_class` proposer that never drafts, `benchmarks/null_proposer.py`).
`--plugin-shortcuts` applies the plugin's zero-draft shortcuts (`vllm_specdec_plugin.zero_draft`)
before the engine starts, as an opted-in engine would.
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
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmarks.configs import NGRAM_IDLE_SPEC, NULL_SPEC  # noqa: E402

SPECS: dict[str, dict[str, Any] | None] = {"none": None, "idle": NGRAM_IDLE_SPEC,
                                           "null": NULL_SPEC}


class Timers:
    def __init__(self) -> None:
        self.total: dict[str, float] = {}
        self.calls: dict[str, int] = {}

    def wrap(self, owner: Any, attribute: str, name: str | None = None) -> None:
        original = getattr(owner, attribute, None)
        if original is None:
            return
        key = name or attribute

        @functools.wraps(original)
        def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                self.total[key] = self.total.get(key, 0.0) + time.perf_counter() - start
                self.calls[key] = self.calls.get(key, 0) + 1

        setattr(owner, attribute, timed)

    def reset(self) -> None:
        self.total.clear()
        self.calls.clear()


def prompts(tokenizer: Any, count: int) -> list[list[int]]:
    workload = json.loads((REPO / "benchmarks" / "workloads" / "open_ended.json").read_text())
    chats = [p["messages"] for p in workload["prompts"]]
    out = []
    for i in range(count):
        text = tokenizer.apply_chat_template(chats[i % len(chats)], add_generation_prompt=True,
                                             tokenize=False)
        out.append(list(tokenizer.encode(text, add_special_tokens=False)))
    return out


def instrument(llm: Any, timers: Timers) -> None:
    engine = llm.llm_engine
    core = engine.engine_core.engine_core
    runner = core.model_executor.driver_worker.worker.model_runner
    timers.wrap(engine, "step", "llm_engine.step (all)")
    timers.wrap(engine.output_processor, "process_outputs", "output_processor")
    timers.wrap(core, "step_fn", "engine_core.step")
    timers.wrap(core, "post_step", "engine_core.post_step")
    timers.wrap(core.scheduler, "schedule", "scheduler.schedule")
    timers.wrap(core.scheduler, "update_from_output", "scheduler.update_from_output")
    timers.wrap(core.scheduler, "update_draft_token_ids", "scheduler.update_draft_token_ids")
    for name in ("execute_model", "sample_tokens", "_update_states", "_prepare_inputs",
                 "_calc_spec_decode_metadata", "_model_forward", "_sample", "_bookkeeping_sync",
                 "propose_draft_token_ids", "take_draft_token_ids",
                 "_update_states_after_model_execute"):
        timers.wrap(runner, name, f"runner.{name}")
    timers.wrap(runner.sampler, "forward", "Sampler.forward")
    if getattr(runner, "rejection_sampler", None) is not None:
        timers.wrap(runner.rejection_sampler, "forward", "RejectionSampler.forward")
    if getattr(runner, "drafter", None) is not None:
        timers.wrap(runner.drafter, "propose", "drafter.propose")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", choices=sorted(SPECS), required=True)
    parser.add_argument("--model")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--cprofile", help="write a cProfile of the last repeat here")
    parser.add_argument("--plugin-shortcuts", action="store_true")
    args = parser.parse_args(argv)
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    from vllm import LLM, SamplingParams

    if args.plugin_shortcuts:
        from vllm_specdec_plugin.engine import zero_draft

        zero_draft.apply_zero_draft_patches()
    model = args.model
    if model is None:
        from benchmarks.smollm2 import ensure_smollm2

        model = str(ensure_smollm2())
    kwargs: dict[str, Any] = {"model": model, "enforce_eager": True, "seed": 0,
                              "kv_cache_memory_bytes": 1 << 30, "max_model_len": 2048,
                              "max_num_seqs": args.batch}
    if SPECS[args.config] is not None:
        kwargs["speculative_config"] = dict(SPECS[args.config])
    llm = LLM(**kwargs)
    batch = prompts(llm.get_tokenizer(), args.batch)
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
        last = profiler is not None and index == args.repeats - 1
        if last:
            profiler.enable()
        start = time.perf_counter()
        outputs = llm.generate(inputs, params, use_tqdm=False)
        walls.append(time.perf_counter() - start)
        if last:
            profiler.disable()
        tokens = [list(o.outputs[0].token_ids) for o in outputs]
        steps = timers.calls.get("engine_core.step", 1)
        per_repeat.append({k: v / steps * 1e6 for k, v in timers.total.items()})
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

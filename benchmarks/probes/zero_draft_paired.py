"""The zero-draft shortcuts where they matter: the plugin's default at k=0, on and off, one engine.

    python -m benchmarks zero_draft_paired [--batches 1,16,32] [--pairs 10] [--steps 32]
        [--model PATH] [--out FILE]

One real `LLM()` with the engine core in this process (`lib/engine_setup.start_llm`),
opted in (`KAITO_ENABLE_SPECULATIVE_DECODING=true`) and given KAITO's n-gram config (k=5,
prompt_lookup_max=4) with `num_speculative_tokens_per_batch_size` [[1, 65536, 0]], so every
step at every batch size drafts nothing: the plugin keeps that config and applies its three
zero-draft shortcuts (`registry.ZERO_DRAFT_SHORTCUTS`, in `engine/changes/`). The plugin's
default CPU schedule drafts nothing above batch 8, hence the default batch sizes 16 and 32
(and 1, the other end, forced to k=0 here). For each batch size B it runs `--pairs` pairs of
blocks; a block is one `generate` of B greedy open-ended prompts for `--steps` tokens each
(ignore_eos), i.e. `--steps` decode steps at batch B. In each pair one block runs with the
shortcuts applied and one with them restored to vLLM's own code, through `engine/patching.py`
(`restore`, then `apply_patch` of the same patch and replacement), in alternating order
(on-off, off-on, ...) so that drift on the host falls on both sides. One warm-up block each
way per batch size is not counted.

Prints `PAIRED {json}` and writes it to `--out` if given: per batch size, the median paired
ratio (output tok/s with the shortcuts over without) with its 90% bootstrap interval
(`benchmarks/lib/stats.py`), every block's tok/s (`--aa`: both arms keep the shortcuts, the
design's own noise), the zero-draft steps the plain sampler took in
the blocks of each kind (must be > 0 with the shortcuts, 0 without: the toggle reached vLLM),
and whether the tokens were identical both ways (greedy: they must be). A single-process
measurement: run it alone on the host.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.lib.engine_setup import model_path, start_llm
from benchmarks.lib.results import write_json
from benchmarks.lib.stats import LEVEL, bootstrap_median_interval
from benchmarks.lib.workloads import workload_token_ids
from benchmarks.paired.configs import NGRAM_IDLE_SPEC


class Shortcuts:
    """The three zero-draft patches as the plugin applied them, switched off and on again."""

    def __init__(self) -> None:
        from vllm_specdec_plugin.engine import patching, registry
        from vllm_specdec_plugin.engine.changes import probing

        self.patching, self.probing = patching, probing
        self.names = list(registry.ZERO_DRAFT_SHORTCUTS)
        missing = sorted(set(self.names) - set(self.in_place()))
        if missing:
            raise SystemExit(f"the plugin did not apply {missing} in this engine: nothing to "
                             "compare (is the plugin installed, and this vLLM a V1 runner?)")
        self.applied = {name: patching._applied[name] for name in self.names}
        self.aa = False
        """A/A: both arms keep the shortcuts (the design's own noise)."""

    def set(self, on: bool) -> None:
        for name, record in self.applied.items():
            if on:
                self.patching.apply_patch(record.patch, record.replacement, announce=False)
            else:
                self.patching.restore(name)
        assert self.in_place() == (self.names if on else [])

    def in_place(self) -> list[str]:
        return [name for name in self.names if self.patching.in_place(name)]

    def plain_steps(self) -> int:
        return self.probing.counts.get("plain", 0)


def run_block(llm: Any, inputs: list[dict[str, Any]], params: Any, shortcuts: Shortcuts,
              on: bool) -> dict[str, Any]:
    shortcuts.set(on or shortcuts.aa)
    plain_before = shortcuts.plain_steps()
    start = time.perf_counter()
    outputs = llm.generate(inputs, params, use_tqdm=False)
    seconds = time.perf_counter() - start
    tokens = [list(o.outputs[0].token_ids) for o in outputs]
    return {"tok_per_s": sum(map(len, tokens)) / seconds, "tokens": tokens,
            "plain_steps": shortcuts.plain_steps() - plain_before}


def measure_batch(llm: Any, inputs: list[dict[str, Any]], params: Any, shortcuts: Shortcuts,
                  pairs: int) -> dict[str, Any]:
    for on in (True, False):  # warm-up, not counted
        run_block(llm, inputs, params, shortcuts, on)
    ratios: list[float] = []
    blocks: dict[str, list[float]] = {"on": [], "off": []}
    plain = {"on": 0, "off": 0}
    same_tokens = True
    for index in range(pairs):
        order = (True, False) if index % 2 == 0 else (False, True)
        result = {on: run_block(llm, inputs, params, shortcuts, on) for on in order}
        ratios.append(result[True]["tok_per_s"] / result[False]["tok_per_s"])
        for on, key in ((True, "on"), (False, "off")):
            blocks[key].append(round(result[on]["tok_per_s"], 2))
            plain[key] += result[on]["plain_steps"]
        same_tokens &= result[True]["tokens"] == result[False]["tokens"]
    shortcuts.set(True)  # as the plugin left it
    interval = bootstrap_median_interval(ratios)
    return {"median_ratio": round(statistics.median(ratios), 4),
            "interval": [round(x, 4) for x in interval] if interval else None,
            "ratios": [round(r, 4) for r in ratios], "tok_per_s": blocks,
            "plain_sampler_steps": plain, "tokens_identical": same_tokens}


def open_ended_inputs(tokenizer: Any, count: int) -> list[dict[str, Any]]:
    """`count` open-ended prompts as token ids."""
    return [{"prompt_token_ids": ids}
            for ids in workload_token_ids(tokenizer, "open_ended", count)]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", default="1,16,32",
                        help="comma-separated batch sizes (default 1,16,32)")
    parser.add_argument("--pairs", type=int, default=10)
    parser.add_argument("--steps", type=int, default=32, help="tokens per request per block")
    parser.add_argument("--model", help="a checkpoint directory (default: SmolLM2-135M, "
                        "built by benchmarks/smollm2.py on first use)")
    parser.add_argument("--out", help="also write the JSON result here")
    parser.add_argument("--aa", action="store_true",
                        help="A/A run: both arms keep the shortcuts (the design's noise)")
    args = parser.parse_args(argv)
    try:
        batches = sorted({int(b) for b in args.batches.split(",")})
    except ValueError:
        parser.error(f"--batches {args.batches!r}: give comma-separated integers, e.g. 1,8,32")
    if not batches or min(batches) < 1 or args.pairs < 1 or args.steps < 1:
        parser.error("--batches, --pairs and --steps must be positive")
    model = model_path(args.model)
    started = time.perf_counter()
    llm = start_llm(model, max(batches), env={"KAITO_ENABLE_SPECULATIVE_DECODING": "true"},
                    speculative_config=dict(NGRAM_IDLE_SPEC))
    from vllm import SamplingParams

    shortcuts = Shortcuts()
    shortcuts.aa = args.aa
    params = SamplingParams(temperature=0.0, max_tokens=args.steps, ignore_eos=True)
    inputs = open_ended_inputs(llm.get_tokenizer(), max(batches))
    result: dict[str, Any] = {
        "model": Path(model).name, "speculative_config": NGRAM_IDLE_SPEC,
        "pairs": args.pairs, "steps": args.steps, "level": LEVEL, "aa": args.aa,
        "load_average_before": os.getloadavg()[0], "by_batch": {}}
    for batch in batches:
        result["by_batch"][str(batch)] = measure_batch(llm, inputs[:batch], params, shortcuts,
                                                       args.pairs)
        print(f"batch {batch}: {json.dumps(result['by_batch'][str(batch)]['median_ratio'])}",
              file=sys.stderr, flush=True)
    result["load_average_after"] = os.getloadavg()[0]
    result["wall_s"] = round(time.perf_counter() - started, 1)
    text = json.dumps(result)
    if args.out:
        write_json(Path(args.out), result)
    print("PAIRED " + text, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

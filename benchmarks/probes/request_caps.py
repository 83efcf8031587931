"""Per-request speculation (`vllm_xargs.num_speculative_tokens`): what opting a request out
costs and keeps, in one engine, paired; and what reading the setting costs a scheduler step.

    python -m benchmarks request_caps [--part mixed,steps] [--workloads a,b]
        [--concurrency 4,16] [--requests 48] [--tokens 96] [--model PATH] [--out FILE]

`mixed`: one in-process engine opted in (SmolLM2 by default), its schedule controller holding
every bucket at k=5 (`restart("k5,k5")`, as `run_pairs` does). Each batch of `concurrency`
requests of a workload is served whole under each arm, the arms in an order drawn at random per
batch:
- `on`: no request sets the field (every request drafts the engine's k);
- `mixed`: every other request sets `num_speculative_tokens: 0`;
- `off`: every request sets 0;
- `k0`: no request sets it, the engine held at k=0 (what the engine costs when it drafts
  nothing: the plugin's zero-draft path, the same engine and host state);
- `k0` again: the A/A of the per-request figures.
Per request its TPOT (vLLM's engine-core timestamps: last token - first token over the tokens
after the first). Per batch the paired ratios: `off` TPOT over `k0` (an opted-out request costs
what a k=0 engine costs), mixed's opted-out half over `off` (what sharing a batch with
speculating requests costs it), mixed's opted-in half over `on` (its gain kept), `on` over `k0`
(the gain itself), and `k0` over `k0` (the A/A). Each figure: the median of the per-batch ratios
with a 90% bootstrap interval. Greedy tokens are compared row by row where both arms treat the
row alike (mixed's halves against `on` and `off`, `off` against `k0`; `same_tokens`) and,
reported apart, where a request's own speculation differs (`on` against `k0`).

`steps`: vLLM's own `Scheduler` (no model) with 256 running requests, each step
`schedule()`, `update_from_output()` and `update_draft_token_ids()` (k=5 drafts handed back as
the engine core does), blocks of steps with the `request-draft-caps` wrappers in place and
blocks with vLLM's own methods, alternating; no request sets the field. The figure: the median
paired difference per step in microseconds, with its interval, and the ratio.

It times the engine: run it alone on the host.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from benchmarks.lib.engine_setup import start_llm
from benchmarks.lib.results import RESULTS_DIR, command, vllm_version, write_json
from benchmarks.lib.workloads import WORKLOADS, workload_token_ids

SEED = 20261203
RESAMPLES = 2000
FIELD = "num_speculative_tokens"
ARMS = ("on", "mixed", "off", "k0", "k0-again")


def median_interval(values: list[float], rng: random.Random) -> dict[str, float]:
    """The median and a 90% bootstrap interval of the median."""
    medians = sorted(statistics.median(rng.choices(values, k=len(values)))
                     for _ in range(RESAMPLES))
    return {"median": statistics.median(values), "low": medians[int(0.05 * RESAMPLES)],
            "high": medians[int(0.95 * RESAMPLES) - 1], "n": len(values)}


def tpot(output: Any) -> float | None:
    """Seconds per output token after the first (vLLM's engine-core timestamps)."""
    stats, tokens = output.metrics, len(output.outputs[0].token_ids)
    if stats is None or tokens < 2 or not stats.last_token_ts:
        return None
    return (stats.last_token_ts - stats.first_token_ts) / (tokens - 1)


def mean(tpots: list[float | None], rows: Callable[[int], bool] = lambda i: True) -> float:
    """The mean TPOT of the chosen rows (index -> chosen) that have one."""
    found = [t for i, t in enumerate(tpots) if rows(i) and t is not None]
    return sum(found) / len(found)


def serve_arm(llm: Any, runtime: Any, batch: list[Any], arm: str, tokens: int) -> list[Any]:
    from vllm import SamplingParams

    k = 0 if arm.startswith("k0") else 5
    runtime.restart(f"k{k},k{k}", fresh=False)
    # The switchback rewrites a bucket's lookup on its next settled step only, and a step with
    # a capped request is never settled (it is no evidence about k): the arm's k is written here.
    runtime.lookup[1:] = [k] * (len(runtime.lookup) - 1)
    params = []
    for index, _ in enumerate(batch):
        off = arm == "off" or (arm == "mixed" and index % 2 == 1)
        params.append(SamplingParams(max_tokens=tokens, temperature=0.0, ignore_eos=True,
                                     extra_args={FIELD: 0} if off else None))
    return llm.generate(batch, params, use_tqdm=False)


def mixed_cell(llm: Any, tokenizer: Any, workload: str, concurrency: int, requests: int,
               tokens: int, rng: random.Random) -> dict[str, Any]:
    from benchmarks.probes.schedule_switchback import runtime_of

    runtime = runtime_of(llm)
    prompts = [{"prompt_token_ids": ids}  # at least 8 batches of `concurrency`
               for ids in workload_token_ids(tokenizer, workload, max(requests, 8 * concurrency))]
    ratios: dict[str, list[float]] = {name: [] for name in (
        "off/k0", "mixed-off-half/off", "mixed-on-half/on", "on/k0", "k0/k0-again")}
    # Greedy tokens of the same rows: a request's own speculation changes the shapes its
    # forward passes run at, so on a float CPU model "on" may differ from "k0"; rows that
    # speculate alike in both arms must not.
    mismatched = {"mixed-on-half/on": 0, "mixed-off-half/off": 0, "off/k0": 0, "on/k0": 0}
    for start in range(0, len(prompts) - concurrency + 1, concurrency):
        batch = prompts[start:start + concurrency]
        tpots: dict[str, list[float | None]] = {}
        tokens_of: dict[str, list[list[int]]] = {}
        for arm in rng.sample(ARMS, len(ARMS)):
            outputs = serve_arm(llm, runtime, batch, arm, tokens)
            tpots[arm] = [tpot(o) for o in outputs]
            tokens_of[arm] = [list(o.outputs[0].token_ids) for o in outputs]
        for name, (a, b, rows) in {"mixed-on-half/on": ("mixed", "on", 0),
                                   "mixed-off-half/off": ("mixed", "off", 1),
                                   "off/k0": ("off", "k0", None),
                                   "on/k0": ("on", "k0", None)}.items():
            mismatched[name] += sum(x != y for i, (x, y) in enumerate(zip(
                tokens_of[a], tokens_of[b], strict=True)) if rows is None or i % 2 == rows)

        odd, even = (lambda i: i % 2 == 1), (lambda i: i % 2 == 0)
        ratios["off/k0"].append(mean(tpots["off"]) / mean(tpots["k0"]))
        if concurrency > 1:
            ratios["mixed-off-half/off"].append(mean(tpots["mixed"], odd)
                                                / mean(tpots["off"], odd))
            ratios["mixed-on-half/on"].append(mean(tpots["mixed"], even)
                                              / mean(tpots["on"], even))
        ratios["on/k0"].append(mean(tpots["on"]) / mean(tpots["k0"]))
        ratios["k0/k0-again"].append(mean(tpots["k0"]) / mean(tpots["k0-again"]))
    runtime.restart("k5,k5", fresh=False)
    return {"workload": workload, "concurrency": concurrency, "batches": len(ratios["off/k0"]),
            "requests": len(prompts), "mismatched_requests": mismatched,
            "same_tokens": not mismatched["mixed-on-half/on"] and not mismatched[
                "mixed-off-half/off"] and not mismatched["off/k0"],
            "tpot_ratios": {name: median_interval(values, rng) if values else None
                            for name, values in ratios.items()},
            "per_batch": ratios}


def steps_cell(model: str, rng: random.Random, blocks: int = 40, block_steps: int = 30,
               batch: int = 256) -> dict[str, Any]:
    """The scheduler's step with and without the `request-draft-caps` wrappers, paired."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "support"))
    from controller_contract import build, scheduler  # vLLM's own config and Scheduler
    from vllm import SamplingParams
    from vllm.v1.core.sched import scheduler as module
    from vllm.v1.outputs import DraftTokenIds, ModelRunnerOutput
    from vllm.v1.request import Request

    from vllm_specdec_plugin.engine import registry

    config, cls = build(model, False)
    config.speculative_config.num_speculative_tokens_per_batch_size = None
    config.scheduler_config.max_num_seqs = batch
    config.scheduler_config.max_num_batched_tokens = max(
        config.scheduler_config.max_num_batched_tokens, batch * 8)
    registry.apply_changes("opted-in", announce=False)
    names = ("add_request", "update_draft_token_ids")
    wrapped = {name: getattr(module.Scheduler, name) for name in names}
    # functools.wraps keeps vLLM's own method on each wrapper
    originals = {name: wrapped[name].__wrapped__ for name in names}
    # Room for every request to grow one token a step through every block (no preemption).
    config.model_config.max_model_len = 8192
    sched = scheduler(config, cls, blocks=batch * 200)
    sched.dynamic_sd_lookup = None
    for index in range(batch):
        params = SamplingParams(max_tokens=100_000, temperature=0.0, ignore_eos=True)
        sched.add_request(Request(request_id=f"r{index}", prompt_token_ids=[1 + index % 50, 2],
                                  sampling_params=params, pooling_params=None))

    def step() -> None:
        out = sched.schedule()
        ids = list(out.num_scheduled_tokens)
        sched.update_from_output(out, ModelRunnerOutput(
            req_ids=ids, req_id_to_index={r: i for i, r in enumerate(ids)},
            sampled_token_ids=[[7] for _ in ids]))
        sched.update_draft_token_ids(DraftTokenIds(ids, [[9] * 5 for _ in ids]))

    for _ in range(20):
        step()  # every request past its prefill
    seconds: dict[str, list[float]] = {"plugin": [], "vllm": []}
    for _ in range(blocks):
        for arm in rng.sample(("plugin", "vllm"), 2):
            for name in names:
                setattr(module.Scheduler, name, (wrapped if arm == "plugin" else originals)[name])
            start = time.perf_counter()
            for _ in range(block_steps):
                step()
            seconds[arm].append((time.perf_counter() - start) / block_steps)
    for name in names:
        setattr(module.Scheduler, name, wrapped[name])
    diffs = [(a - b) * 1e6 for a, b in zip(seconds["plugin"], seconds["vllm"], strict=True)]
    ratios = [a / b for a, b in zip(seconds["plugin"], seconds["vllm"], strict=True)]
    return {"batch": batch, "blocks": blocks, "block_steps": block_steps,
            "running_at_end": len(sched.running),
            "step_us_vllm": statistics.median(seconds["vllm"]) * 1e6,
            "added_us_per_step": median_interval(diffs, rng),
            "ratio": median_interval(ratios, rng)}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--part", type=lambda s: s.split(","), default=["mixed", "steps"])
    parser.add_argument("--workloads", type=lambda s: s.split(","),
                        default=["input_grounded", "open_ended"])
    parser.add_argument("--concurrency", type=lambda s: [int(c) for c in s.split(",")],
                        default=[4, 16])
    parser.add_argument("--requests", type=int, default=48,
                        help="per cell; at least 8 batches of the cell's concurrency")
    parser.add_argument("--tokens", type=int, default=96)
    parser.add_argument("--model", help="a checkpoint directory (default: SmolLM2-135M)")
    parser.add_argument("--out", default=str(RESULTS_DIR / "request-caps.json"))
    args = parser.parse_args(argv)
    assert set(args.workloads) <= set(WORKLOADS), args.workloads
    rng = random.Random(SEED)
    out: dict[str, Any] = {"meta": {"kind": "request-caps", "command": command(
        "request_caps", list(argv or sys.argv[1:])), "vllm": vllm_version(),
        "requests": args.requests, "tokens": args.tokens, "seed": SEED}}
    if "mixed" in args.part:
        llm = start_llm(args.model, 32, env={"KAITO_ENABLE_SPECULATIVE_DECODING": "true"},
                        disable_log_stats=False)
        tokenizer = llm.get_tokenizer()
        serve_arm(llm, __import__("benchmarks.probes.schedule_switchback", fromlist=["x"])
                  .runtime_of(llm), [{"prompt_token_ids": [1, 2, 3]}], "on", 8)  # warm-up
        out["mixed"] = []
        for workload in args.workloads:
            for concurrency in args.concurrency:
                cell = mixed_cell(llm, tokenizer, workload, concurrency, args.requests,
                                  args.tokens, rng)
                out["mixed"].append(cell)
                print("CELL", json.dumps({k: v for k, v in cell.items() if k != "per_batch"}),
                      flush=True)
        model = str(llm.llm_engine.vllm_config.model_config.model)
    else:
        from benchmarks.lib.engine_setup import model_path

        model = model_path(args.model)
    if "steps" in args.part:
        out["steps"] = steps_cell(model, rng)
        print("STEPS", json.dumps(out["steps"]), flush=True)
    write_json(Path(args.out), out, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

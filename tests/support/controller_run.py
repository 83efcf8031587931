"""Run a real vLLM engine in this process with the schedule controller and print what it did.

Used by tests/engine/test_schedule_controller.py as `python tests/support/controller_run.py SPEC`
in a fresh process (the plugin loads through its entry point, as in production; the engine core
runs in this process, `VLLM_ENABLE_V1_MULTIPROCESSING=0`, so the scheduler can be read).
SPEC: {"model", "prompts", "max_tokens", "max_num_seqs", "temperature" (default 0: greedy),
"draft_cost_s" (optional: each step that verifies drafts sleeps this long per draft token and
request, standing in for a verifier that costs more than this tiny model's), "until" (optional,
{"bucket", "k", "rounds"}: the prompts again, up to `rounds` times in all, until the controller
holds k in that bucket)}.
"logprobs" (optional: vLLM's top-n logprobs per position, reported as "top2").
Output (last stdout line): {"token_ids", "top2", "lookup", "runtime" (None: no controller), "table",
"snapshot", "metrics"}.
"""

from __future__ import annotations

import json
import os
import sys
import time

from engine_layout import IN_PROCESS
from greedy import top_two

# The scheduler is read from this process: the in-process layout always, whatever the caller's
# env says (tests/support/engine_layout.py owns the switch).
os.environ.update(IN_PROCESS)


def main(spec: dict) -> dict:
    from vllm import LLM, SamplingParams

    llm = LLM(model=spec["model"], max_num_seqs=spec.get("max_num_seqs", 16), enforce_eager=True,
              seed=0, max_model_len=1024, kv_cache_memory_bytes=1 << 28,
              distributed_executor_backend="uni", disable_log_stats=False,
              **spec.get("llm", {}))
    core = llm.llm_engine.engine_core.engine_core
    scheduler = core.scheduler
    cost = spec.get("draft_cost_s")
    if cost:
        execute = core.model_executor.execute_model

        def slower(scheduler_output, *args, **kwargs):
            drafted = sum(map(len, scheduler_output.scheduled_spec_decode_tokens.values()))
            if drafted:
                time.sleep(cost * drafted)
            return execute(scheduler_output, *args, **kwargs)

        core.model_executor.execute_model = slower
    params = SamplingParams(max_tokens=spec.get("max_tokens", 64), ignore_eos=True,
                            temperature=spec.get("temperature", 0.0), seed=0,
                            logprobs=spec.get("logprobs"))
    until = spec.get("until")  # {"bucket": key, "k": k, "rounds": n}
    for _ in range(until["rounds"] if until else 1):
        outputs = llm.generate(spec["prompts"], params, use_tqdm=False)
        runtime = scheduler.__dict__.get("_specdec_schedule_runtime")  # set at the first step
        if until and runtime is not None and runtime.controller.table().get(
                until["bucket"]) == until["k"]:
            break
    out = {"token_ids": [list(o.outputs[0].token_ids) for o in outputs],
           # with "logprobs": per position, (the best token's logprob, the runner-up's id and
           # logprob): where a greedy run's top two are within float noise
           "top2": [[top_two(position) for position in o.outputs[0].logprobs or []]
                    for o in outputs],
           "lookup": list(scheduler.dynamic_sd_lookup or []),
           "runtime": runtime is not None,
           "metrics": {m.name: m.value for m in llm.get_metrics()
                       if m.name.startswith("vllm:spec_decode") and hasattr(m, "value")}}
    if runtime is not None:
        runtime.write_report()
        out["snapshot"] = runtime.snapshot(switchback=True)
        out["report_path"] = runtime.report_path
        out["table"] = {str(k): v for k, v in runtime.controller.table().items()}
    return out


if __name__ == "__main__":
    print(json.dumps(main(json.loads(sys.argv[1]))))

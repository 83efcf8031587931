"""One configuration's engine: start `LLM()` once, then run the bursts the harness asks for.

Run by the paired harness (`paired/engine_client.py`) as `python -m benchmarks.paired.engine
SPEC.json` in a fresh process (and process group) per configuration, so engines never share
state (suffix decoding's cache, the prefix cache, the plugin's one-time hook) and a stuck engine
is killed whole. Both engines of a
comparison stay up at once; the harness sends each a burst in turn (commands on stdin, answers
on the pipe named by $BENCH_RESULT_FD), so their bursts interleave in time.

How concurrency is measured: the engine is started once with `max_num_seqs` = the highest
concurrency, and each cell drives it in a closed loop through `LLMEngine.add_request`/`step`:
exactly N requests are in flight from the start, and each finished request is replaced by the
next one until the cell's requests run out (like N users each sending their next request as soon
as the previous answer arrives, or `vllm bench serve --max-concurrency N`). That is the batch size
the scheduler and the speculator see, without restarting the engine per level. The harness sends
N requests that all run to max_tokens (ignore_eos), so a burst holds the batch at exactly N.
Per-request timing comes from the engine core's own timestamps (`RequestOutput.metrics`, filled
because stats logging is on): TPOT = (last token - first token) / (tokens - 1).
"""

from __future__ import annotations

import json
import sys
import time
from collections import deque
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from benchmarks.lib.workloads import output_lengths, render
from vllm_specdec_plugin.inputs.vllm_metrics import ACCEPTED, DRAFT_TOKENS, DRAFTS

WARMUP_PROMPT = [{"role": "user", "content": "Count from one to twenty in words."}]
SPEC_COUNTERS = {
    DRAFTS.removesuffix("_total"): "drafts",
    DRAFT_TOKENS.removesuffix("_total"): "draft_tokens",
    ACCEPTED.removesuffix("_total"): "accepted",
}
"""In-process `LLM.get_metrics()` names (the one reader's, without Prometheus' `_total`)."""


def spec_counters(llm: Any) -> dict[str, float]:
    """The speculative-decoding counters right now (0 when speculation is off)."""
    values = dict.fromkeys(SPEC_COUNTERS.values(), 0.0)
    for metric in llm.get_metrics():
        key = SPEC_COUNTERS.get(metric.name)
        if key is not None and hasattr(metric, "value"):
            values[key] += float(metric.value)
    return values


def closed_loop(engine: Any, prompts: list[tuple[str, list[int]]], concurrency: int,
                params: list[Any]) -> Iterator[Any]:
    """Keep `concurrency` requests in flight until `prompts` run out (`params[i]` for prompt
    i); yield finished outputs."""
    pending = deque((*prompt, each) for prompt, each in zip(prompts, params, strict=True))
    in_flight = 0
    while pending and in_flight < concurrency:
        engine.add_request(*pending.popleft())
        in_flight += 1
    while engine.has_unfinished_requests():
        for output in engine.step():
            if not output.finished:
                continue
            in_flight -= 1
            yield output
            if pending:
                engine.add_request(*pending.popleft())
                in_flight += 1


def request_record(output: Any) -> dict[str, Any]:
    """Tokens and engine-core timing of one finished request."""
    completion = output.outputs[0]
    stats = output.metrics
    n = len(completion.token_ids)
    decode_s = stats.last_token_ts - stats.first_token_ts if stats is not None else None
    return {
        "id": output.request_id,
        "token_ids": list(completion.token_ids),
        "finish_reason": completion.finish_reason,
        "ttft_s": None if stats is None else stats.first_token_ts - stats.queued_ts,
        "tpot_s": decode_s / (n - 1) if decode_s is not None and n > 1 else None,
    }


def run_cell(llm: Any, cell: dict[str, Any], params: Any) -> dict[str, Any]:
    """Run one workload x concurrency cell; counters are deltas over the cell. `params`: one
    SamplingParams for every request, or with the cell's `lengths` "uniform" the max_tokens
    of each request drawn around `params.max_tokens` (`output_lengths`)."""
    tokenizer = llm.get_tokenizer()
    tag = cell.get("tag") or f"{cell['workload']}-c{cell['concurrency']}"
    prompts = [(f"{tag}-{p['id']}", render(tokenizer, p["messages"])) for p in cell["prompts"]]
    before = spec_counters(llm)
    start = time.perf_counter()
    each = [params] * len(prompts)
    if cell.get("lengths", "fixed") != "fixed":
        each = [sampling_params(n, params.ignore_eos) for n in
                output_lengths(cell["lengths"], params.max_tokens, len(prompts))]
    outputs = list(closed_loop(llm.llm_engine, prompts, cell["concurrency"], each))
    elapsed = time.perf_counter() - start
    after = spec_counters(llm)
    records = {o.request_id: request_record(o) for o in outputs}
    return {
        "workload": cell["workload"],
        "concurrency": cell["concurrency"],
        "elapsed_s": elapsed,
        "prompt_tokens": sum(len(ids) for _, ids in prompts),
        "spec": {key: after[key] - before[key] for key in after},
        "requests": [{**records[rid], "id": rid.removeprefix(f"{tag}-")} for rid, _ in prompts],
    }


SPEC_KEYS = {
    "ngram": ("prompt_lookup_min", "prompt_lookup_max"),
    "suffix": ("suffix_decoding_max_tree_depth", "suffix_decoding_max_spec_factor",
               "suffix_decoding_min_token_prob"),
}


def spec_summary(spec: Any) -> dict[str, Any] | None:
    """The speculative config's method-relevant fields."""
    if spec is None:
        return None
    keys = ("method", "num_speculative_tokens", "model", "num_speculative_tokens_per_batch_size",
            *SPEC_KEYS.get(spec.method, ()))
    values = {key: getattr(spec, key, None) for key in keys}
    if values["model"] == spec.method:  # ngram/suffix name themselves as the "model"
        values["model"] = None
    return {key: value for key, value in values.items() if value is not None}


def resolved_config(llm: Any) -> dict[str, Any]:
    """What the engine actually runs with (after the plugin and vLLM)."""
    config = llm.llm_engine.vllm_config
    return {
        "speculative_config": spec_summary(config.speculative_config),
        "model_impl": str(config.model_config.model_impl),
        "dtype": str(config.model_config.dtype).removeprefix("torch."),
        "async_scheduling": config.scheduler_config.async_scheduling,
        "max_num_seqs": config.scheduler_config.max_num_seqs,
    }


def sampling_params(max_tokens: int, ignore_eos: bool = True) -> Any:
    """Greedy, final outputs only; every request runs `max_tokens` unless `ignore_eos` is off."""
    from vllm import SamplingParams
    from vllm.sampling_params import RequestOutputKind

    return SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=ignore_eos,
                          output_kind=RequestOutputKind.FINAL_ONLY)


def serve(spec: dict[str, Any], results: Any, commands: Any) -> None:
    """Start the engine, warm it up, then run one burst per command line until "stop".

    Commands (JSON lines on `commands`): {"op": "burst", "cell": {...}, "max_tokens": N} runs
    the cell (closed loop) and answers its raw record; {"op": "stop"} ends. Answers are JSON
    lines on `results` (the engine's own stdout carries vLLM's log): first
    {"ready": true, "startup_s", "resolved"}, then one per burst.
    """
    from vllm import LLM

    start = time.perf_counter()
    llm = LLM(**spec["llm"])
    startup_s = time.perf_counter() - start
    warmup = {"workload": "warmup", "concurrency": 2,
              "prompts": [{"id": str(i), "messages": WARMUP_PROMPT} for i in range(2)]}
    run_cell(llm, warmup, sampling_params(8))

    def answer(payload: dict[str, Any]) -> None:
        results.write(json.dumps(payload) + "\n")
        results.flush()

    answer({"ready": True, "startup_s": startup_s, "resolved": resolved_config(llm)})
    for line in commands:
        command = json.loads(line)
        if command["op"] == "stop":
            break
        params = sampling_params(command["max_tokens"], command.get("ignore_eos", True))
        answer(run_cell(llm, command["cell"], params))
    llm.llm_engine.engine_core.shutdown()


def main(spec_path: str) -> None:
    """`python -m benchmarks.paired.engine SPEC.json`: serve bursts; answers on fd
    $BENCH_RESULT_FD."""
    import os

    spec = json.loads(Path(spec_path).read_text())
    with os.fdopen(int(os.environ["BENCH_RESULT_FD"]), "w") as results:
        serve(spec, results, sys.stdin)


if __name__ == "__main__":
    main(sys.argv[1])

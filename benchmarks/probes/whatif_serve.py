"""Serve each benchmark workload one request at a time, opted in, and keep what the engine did.

    python -m benchmarks whatif_serve --method ngram|suffix [--requests 56] [--tokens 96]
        [--workloads input_grounded,multi_turn,open_ended,mt_bench] [--model PATH] [--out DIR]

What `vllm-specdec whatif`'s exactness is checked against (docs/operations.md, "whatif"). One
real `LLM()` on SmolLM2-135M (default), opted in with the user's own speculative config (the
plugin leaves it as written: no schedule), `ngram` = KAITO's fallback
(`{"method": "ngram", "num_speculative_tokens": 5, "prompt_lookup_max": 4}`) or `suffix`
(vLLM's defaults). Each request is served alone (greedy, ignore_eos, `--tokens` tokens): the
tokens it produces are the same with or without speculation, so they are the traffic. Written
per workload: `traffic-<workload>.jsonl` (OpenAI completions request/response pairs carrying
vLLM's `prompt_token_ids` and `token_ids`, as `return_token_ids` logs them) and
`engine-<method>-<workload>.json` (vLLM's spec-decode counters over those requests, in traffic
order; the suffix tree's cross-request cache sees them in that order too).
Not a timing benchmark: it can share the host, but nothing in it is timed.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.lib.engine_setup import start_llm
from benchmarks.lib.results import RESULTS_DIR, command, vllm_version, write_json
from benchmarks.lib.workloads import WORKLOADS, workload_token_ids
from vllm_specdec_plugin.inputs.vllm_metrics import (
    ACCEPTED,
    ACCEPTED_PER_POSITION,
    DRAFT_TOKENS,
    DRAFTS,
    SPEC_DECODE_PREFIX,
    offline_name,
)

CONFIGS: dict[str, dict[str, Any]] = {
    "ngram": {"method": "ngram", "num_speculative_tokens": 5, "prompt_lookup_max": 4},
    "suffix": {"method": "suffix"},
}
OUT_DIR = RESULTS_DIR / "whatif"


def spec_counters(llm: Any) -> dict[str, Any]:
    """vLLM's spec-decode counters now: totals, and accepted tokens by draft position."""
    totals: dict[str, float] = {}
    by_position: dict[int, float] = {}
    for metric in llm.get_metrics():
        if not metric.name.startswith(SPEC_DECODE_PREFIX):
            continue
        if metric.name == offline_name(ACCEPTED_PER_POSITION):
            for position, value in enumerate(getattr(metric, "values", [])):
                by_position[position] = by_position.get(position, 0) + value
        elif hasattr(metric, "value"):
            totals[metric.name] = totals.get(metric.name, 0) + metric.value
    return {"totals": totals,
            "accepted_by_position": [by_position[p] for p in sorted(by_position)]}


def delta(after: dict[str, Any], before: dict[str, Any]) -> dict[str, Any]:
    totals = {name: value - before["totals"].get(name, 0)
              for name, value in after["totals"].items()}
    old = before["accepted_by_position"]
    positions = [v - (old[i] if i < len(old) else 0)
                 for i, v in enumerate(after["accepted_by_position"])]
    return {"num_drafts": totals.get(offline_name(DRAFTS)),
            "num_draft_tokens": totals.get(offline_name(DRAFT_TOKENS)),
            "num_accepted_tokens": totals.get(offline_name(ACCEPTED)),
            "accepted_by_position": positions}


def pair(prompt_ids: list[int], prompt_text: str, output: Any, model: str,
         tokens: int) -> dict[str, Any]:
    """One OpenAI completions request/response pair, with vLLM's token ids."""
    out = output.outputs[0]
    return {"request": {"model": model, "prompt": prompt_text, "max_tokens": tokens,
                        "temperature": 0, "ignore_eos": True, "return_token_ids": True},
            "response": {"object": "text_completion", "model": model,
                         "prompt_token_ids": list(prompt_ids),
                         "choices": [{"index": 0, "text": out.text,
                                      "token_ids": list(out.token_ids),
                                      "finish_reason": out.finish_reason}]}}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--method", choices=sorted(CONFIGS), required=True)
    parser.add_argument("--requests", type=int, default=56)
    parser.add_argument("--tokens", type=int, default=96)
    parser.add_argument("--workloads", default=",".join(WORKLOADS))
    parser.add_argument("--model", help="a checkpoint directory (default: SmolLM2-135M)")
    parser.add_argument("--out", default=str(OUT_DIR))
    args = parser.parse_args(argv)
    from vllm import SamplingParams

    llm = start_llm(args.model, 4, env={"KAITO_ENABLE_SPECULATIVE_DECODING": "true"},
                    speculative_config=CONFIGS[args.method], disable_log_stats=False)
    spec = llm.llm_engine.vllm_config.speculative_config
    resolved = {key: getattr(spec, key, None) for key in (
        "method", "num_speculative_tokens", "prompt_lookup_min", "prompt_lookup_max",
        "suffix_decoding_max_tree_depth", "suffix_decoding_max_cached_requests",
        "suffix_decoding_max_spec_factor", "suffix_decoding_min_token_prob")}
    tokenizer = llm.get_tokenizer()
    params = SamplingParams(max_tokens=args.tokens, temperature=0.0, ignore_eos=True)
    out_dir = Path(args.out)
    model = Path(llm.llm_engine.vllm_config.model_config.model).name
    served = []
    workloads = [w for w in args.workloads.split(",") if w]
    for order, workload in enumerate(workloads):
        prompts = workload_token_ids(tokenizer, workload, args.requests)
        before = spec_counters(llm)
        lines, outputs = [], []
        for ids in prompts:  # one at a time: each request alone in the batch
            output = llm.generate([{"prompt_token_ids": ids}], params, use_tqdm=False)[0]
            lines.append(pair(ids, tokenizer.decode(ids), output, model, args.tokens))
            outputs.append(list(output.outputs[0].token_ids))
        counters = delta(spec_counters(llm), before)
        traffic = out_dir / f"traffic-{args.method}-{workload}.jsonl"
        traffic.parent.mkdir(parents=True, exist_ok=True)
        traffic.write_text("".join(json.dumps(line) + "\n" for line in lines))
        result = {"meta": {"command": command("whatif_serve", list(argv or sys.argv[1:])),
                           "vllm": vllm_version(), "workload": workload, "order": order,
                           "workloads": workloads, "requests": len(prompts),
                           "tokens_per_request": args.tokens,
                           "speculative_config": resolved, "traffic": traffic.name},
                  "engine": counters}
        served.append((workload, prompts, outputs, result))
        print("SERVED", json.dumps(result), flush=True)
    further = SamplingParams(max_tokens=int(spec.num_speculative_tokens), temperature=0.0,
                             ignore_eos=True)
    for workload, prompts, outputs, result in served:
        result["continuations"] = [
            list(llm.generate([{"prompt_token_ids": ids + output}], further,
                              use_tqdm=False)[0].outputs[0].token_ids)
            for ids, output in zip(prompts, outputs, strict=True)]
        write_json(out_dir / f"engine-{args.method}-{workload}.json", result, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

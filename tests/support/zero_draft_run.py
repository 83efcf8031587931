"""Run a real vLLM engine over several batches, one `generate` each; print tokens as JSON.

`python tests/support/zero_draft_run.py SPEC_JSON`, SPEC {"llm": {...LLM kwargs...}, "batches":
[[{... SamplingParams kwargs...}, ...], ...], "prompts": [...], "max_tokens": N}: batch i sends
prompt j with the j-th SamplingParams of batch i (ignore_eos, `max_tokens`). Used by
tests/engine/test_zero_draft.py so that one engine runs a batch the zero-draft shortcut takes and
one its guard refuses (logprobs), in that order. Output (last stdout line): {"batches":
[[{"token_ids", "logprobs"}, ...], ...]} with each position's logprobs as {token id: logprob}.
"""

from __future__ import annotations

import json
import sys

from engine_layout import llm_kwargs


def main() -> None:
    spec = json.loads(sys.argv[1])
    from vllm import LLM, SamplingParams

    kwargs = llm_kwargs({"enforce_eager": True, "kv_cache_memory_bytes": 1 << 30,
                         "max_model_len": 1024, **spec["llm"]})
    llm = LLM(**kwargs)
    batches = []
    for batch in spec["batches"]:
        params = [SamplingParams(**{"max_tokens": spec["max_tokens"], "ignore_eos": True,
                                    **extra}) for extra in batch]
        outputs = llm.generate(spec["prompts"][:len(params)], params, use_tqdm=False)
        batches.append([{
            "token_ids": list(o.outputs[0].token_ids),
            "logprobs": None if o.outputs[0].logprobs is None else [
                {str(t): round(lp.logprob, 5) for t, lp in position.items()}
                for position in o.outputs[0].logprobs]} for o in outputs])
    print(json.dumps({"batches": batches}), flush=True)
    llm.llm_engine.engine_core.shutdown()


if __name__ == "__main__":
    main()

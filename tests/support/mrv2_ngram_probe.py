"""Run vLLM's Model Runner V2 n-gram kernels (`NgramGPUSpeculator`'s) on CPU tensors under
Triton's interpreter; write the drafts they produce.

`python tests/support/mrv2_ngram_probe.py IN.npz OUT.npz` (the test's interpreter, in a process
of its own: TRITON_INTERPRET must be set before triton is imported); with IN `-`, IN's path is
read from stdin's first line once vLLM is imported (the caller prepares IN meanwhile).

IN holds groups 0, 1, ...: `config_{i}` = [k, prompt_lookup_min, prompt_lookup_max,
max_model_len], `tokens_{i}` (rows, max_model_len) int32 and `lengths_{i}` (rows,) int32: one row
per (request, step) context, the context being tokens[:length] (what lies past it is there to be
ignored, as in the engine's token buffer). Each group is one `NgramGPUSpeculator.propose` call
over all its rows (the class as vLLM builds it, from a stand-in of the config and request state
it reads: one launch of each kernel, its own block size and buffers); every row has sampled one
token (num_sampled 1) and its last sampled token is its context's last. OUT: `drafts_{i}`
(rows, k) int64, and `seconds` (the kernels' time per group).

What is changed, and it is Triton's interpreter, not vLLM: the finalize kernel's load mask
(`slot_valid`, an `&` of bool tensors) reaches `_interpreter.load` as int32, which raises "mask
has unsupported dtype"; `create_masked_load` is wrapped to pass the mask's data as bool (the
values are 0/1 either way). vLLM's kernels run as written.
"""

from __future__ import annotations

import os
import sys
import time
from types import SimpleNamespace

os.environ["TRITON_INTERPRET"] = "1"

import numpy as np  # noqa: E402
import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from triton.runtime import interpreter  # noqa: E402

_masked_load = interpreter.InterpreterBuilder.create_masked_load


def _bool_mask_load(self, ptrs, mask, *args, **kwargs):  # type: ignore[no-untyped-def]
    mask = interpreter.TensorHandle(mask.data.astype(bool), mask.dtype)
    return _masked_load(self, ptrs, mask, *args, **kwargs)


interpreter.InterpreterBuilder.create_masked_load = _bool_mask_load

import vllm.triton_utils as triton_utils  # noqa: E402

# vLLM disables Triton on a CPU host (no CPU backend); the interpreter needs none
triton_utils.triton, triton_utils.tl, triton_utils.HAS_TRITON = triton, tl, True

from vllm.v1.worker.gpu.spec_decode.ngram import speculator  # noqa: E402


def drafts(tokens: np.ndarray, lengths: np.ndarray, k: int, min_n: int, max_n: int,
           max_model_len: int) -> np.ndarray:
    """`NgramGPUSpeculator(...).propose(...)` on the rows: the class itself (its block size,
    buffers and both kernel launches), built from a stand-in of the config it reads."""
    rows = len(lengths)
    config = SimpleNamespace(
        speculative_config=SimpleNamespace(prompt_lookup_min=min_n, prompt_lookup_max=max_n,
                                           num_speculative_tokens=k),
        scheduler_config=SimpleNamespace(max_num_seqs=rows),
        model_config=SimpleNamespace(max_model_len=max_model_len))
    token_ids = torch.from_numpy(np.ascontiguousarray(tokens, dtype=np.int32))
    assert token_ids.shape == (rows, max_model_len)
    total_len = torch.from_numpy(np.ascontiguousarray(lengths, dtype=np.int32))
    states = SimpleNamespace(all_token_ids=SimpleNamespace(gpu=token_ids),
                             total_len=SimpleNamespace(gpu=total_len))
    drafter = speculator.NgramGPUSpeculator(config, torch.device("cpu"), states)
    batch = SimpleNamespace(num_reqs=rows, idx_mapping=torch.arange(rows, dtype=torch.int64))
    last_sampled = token_ids[torch.arange(rows), total_len.long() - 1].to(torch.int64)
    out = drafter.propose(batch, None, None, None, None,
                          num_sampled=torch.ones(rows, dtype=torch.int32),
                          num_rejected=torch.zeros(rows, dtype=torch.int32),
                          last_sampled=last_sampled.view(rows, 1), next_prefill_tokens=None,
                          temperature=None, seeds=None)
    return out.numpy().copy()


def main(source: str, target: str) -> None:
    if source == "-":
        source = sys.stdin.readline().strip()
    data = np.load(source)
    found: dict[str, np.ndarray] = {}
    seconds = []
    i = 0
    while f"config_{i}" in data:
        k, min_n, max_n, max_model_len = (int(x) for x in data[f"config_{i}"])
        start = time.perf_counter()
        found[f"drafts_{i}"] = drafts(data[f"tokens_{i}"], data[f"lengths_{i}"], k, min_n,
                                      max_n, max_model_len)
        seconds.append(time.perf_counter() - start)
        i += 1
    np.savez(target, seconds=np.asarray(seconds), **found)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])

"""Model Runner V2's n-gram drafter, replayed: what `ngram` drafts on a CUDA host.

With Triton present vLLM 0.32/0.33 run Model Runner V2, whose `ngram` drafter is
`NgramGPUSpeculator` (`vllm/v1/worker/gpu/spec_decode/ngram/speculator.py`, two Triton kernels,
identical in both versions), not the V1 matcher `replay.py` calls. Its rules, for a context of
`seq_len` tokens (the prompt and the tokens emitted so far):

- for n from prompt_lookup_min to prompt_lookup_max, the context's last n tokens are matched at
  every position pos with pos + n <= seq_len - 1 (never the suffix itself);
- the best match is the longest n, then the rightmost pos; the draft starts at pos + n;
- each of the k slots i takes token[pos + n + i] where that index is below seq_len; every other
  slot, and all k when nothing matches, takes the last sampled token (the context's last);
- so a row drafts k tokens every step, verified as ordinary drafts (a padded slot is accepted
  where the text repeats that token).

The step loop is `replay.py`'s (its module docstring): the prefill emits the first token, each
verify step accepts the draft's longest prefix equal to the tokens that came and emits
min(1 + accepted, n - g), drafts clipped so that context + draft <= max_model_len - 1. Written
from the kernels' source, not called (they need a GPU); `tests/unit/whatif/test_replay_mrv2.py`
checks this replay step by step against the kernels run under Triton's interpreter. One pass
from the right per step: the longest suffix match ending at each position, the first maximum
kept (O(context x prompt_lookup_max) at worst, stopping at a full-length match).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import numpy as np

from vllm_specdec_plugin.whatif.types import ReplayRequest


@dataclass(frozen=True)
class Trace:
    """One request's verify steps as the replay took them (tests compare them with vLLM's)."""

    lengths: np.ndarray
    """The context length each step drafted from."""
    drafts: np.ndarray
    """(steps, k): the drafter's k tokens per step, before the max_model_len clip."""
    sizes: np.ndarray
    """The draft tokens verified per step (k, less where the clip cut it)."""
    accepted: np.ndarray
    """The draft tokens each step accepted."""


@functools.cache
def _mrv2_loop() -> tuple[Any, Any, Any]:
    """(propose, run, one_request), compiled by numba once per process."""
    import numba

    @numba.njit(nogil=True)
    def propose(row: np.ndarray, length: int, min_n: int, max_n: int, k: int,
                max_model_len: int, out: np.ndarray) -> None:  # pragma: no cover (compiled)
        # the longest suffix match ending at each end position e = pos + n - 1, from the right;
        # pos + n <= length - 1 means e <= length - 2; a strictly longer match replaces the
        # best, so of equal lengths the rightmost (the first seen) is kept
        best_n = 0
        best_end = -1
        e = length - 2
        while e >= 0 and best_n < max_n:
            m = 0
            while m < max_n and m <= e and row[e - m] == row[length - 1 - m]:
                m += 1
            if m >= min_n and m > best_n:
                best_n, best_end = m, e
            e -= 1
        last = row[length - 1]
        start = best_end + 1  # pos + n
        for i in range(k):
            index = start + i
            if best_n > 0 and index < length:  # the kernel's clip to L - 1: a no-op here
                out[i] = row[min(index, max_model_len - 1)]
            else:
                out[i] = last

    @numba.njit(nogil=True)
    def run(row: np.ndarray, prompt_len: int, n: int, known: int, min_n: int, max_n: int,
            max_model_len: int, k: int, by_position: np.ndarray, trace: np.ndarray
            ) -> tuple[int, int, int, int, int]:  # pragma: no cover (compiled)
        # row: prompt + completion (+ continuation), `known` tokens after the prompt; the
        # drafter reads row[:length] only. trace: (rows, 3 + k), filled up to its rows with
        # (length, size, accepted, the k drafted tokens) per step
        draft = np.zeros(k, dtype=np.int32)
        steps = drafting = drafted = accepted = past_end = 0
        g = 1  # the prefill emitted the first token
        while g < n:
            length = prompt_len + g
            propose(row, length, min_n, max_n, k, max_model_len, draft)
            size = max(min(k, max_model_len - 1 - length), 0)  # the scheduler's clip
            ok = 0
            while ok < size and g + ok < known and draft[ok] == row[length + ok]:
                by_position[ok] += 1
                ok += 1
            if ok < size and g + ok >= known:  # matched to the end of what is known
                past_end += size - ok
            if steps < trace.shape[0]:
                trace[steps, 0], trace[steps, 1], trace[steps, 2] = length, size, ok
                trace[steps, 3:] = draft
            steps += 1
            drafting += size > 0
            drafted += size
            accepted += ok
            g += min(1 + ok, n - g)
        return steps, drafting, drafted, accepted, past_end

    @numba.njit(nogil=True)
    def one_request(row: np.ndarray, prompt_len: int, n: int, known: int, min_n: int,
                    max_n: int, max_model_len: int, k: int, by_position: np.ndarray
                    ) -> tuple[int, int, int, int, int]:  # pragma: no cover (compiled)
        # `replay._ngram_loop`'s signature, so that `replay.replay_ngram` drives either
        return run(row, prompt_len, n, known, min_n, max_n, max_model_len, k, by_position,
                   np.zeros((0, 3 + k), dtype=np.int64))

    return propose, run, one_request


def _lookup(resolved: dict[str, Any]) -> tuple[int, int, int]:
    return (int(resolved["prompt_lookup_min"]), int(resolved["prompt_lookup_max"]),
            int(resolved["num_speculative_tokens"]))


def propose_mrv2(context: np.ndarray, resolved: dict[str, Any], max_model_len: int
                 ) -> np.ndarray:
    """The k tokens `NgramGPUSpeculator` drafts after `context` (int32 token ids)."""
    low, high, k = _lookup(resolved)
    row = np.ascontiguousarray(context, dtype=np.int32)
    out = np.zeros(k, dtype=np.int32)
    _mrv2_loop()[0](row, len(row), low, high, k, max_model_len, out)
    return out


def mrv2_loop() -> Any:
    """The loop over one request's steps, with `replay._ngram_loop`'s signature (numba)."""
    return _mrv2_loop()[2]


def trace_request(request: ReplayRequest, resolved: dict[str, Any], max_model_len: int
                  ) -> Trace:
    """One request's steps (`Trace`) as `replay.replay` replays them with this drafter, for a
    request with no continuation and a prompt below max_model_len (its completion cut where
    prompt + completion reaches max_model_len, as `replay._fit` cuts it)."""
    low, high, k = _lookup(resolved)
    prompt_len = len(request.prompt_ids)
    n = max(min(len(request.completion_ids), max_model_len - prompt_len), 0)
    row = np.zeros(max(max_model_len, prompt_len + n), dtype=np.int32)
    row[:prompt_len] = request.prompt_ids
    row[prompt_len:prompt_len + n] = request.completion_ids[:n]
    trace = np.zeros((max(n - 1, 0), 3 + k), dtype=np.int64)
    steps = _mrv2_loop()[1](row, prompt_len, n, n, low, high, max_model_len, k,
                            np.zeros(k, dtype=np.int64), trace)[0] if prompt_len and n else 0
    trace = trace[:steps]
    return Trace(lengths=trace[:, 0], sizes=trace[:, 1], accepted=trace[:, 2],
                 drafts=trace[:, 3:])

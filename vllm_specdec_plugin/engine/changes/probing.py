"""What the zero-draft shortcuts did, counted apart from their probes' own calls, and the vLLM
inputs the probes build (shared by `sample_rejection_sampler.py`, `worker_gpu_model_runner.py`
and `spec_decode_ngram_proposer.py`).

`counts` records what the patched code did in this process; a probe's own calls count apart
(under "probe:", inside `Probing`) and log nothing, so a probe can tell that vLLM's call went
through the patch. The builders make the inputs the probes (and tests/support/zero_draft_probe.py,
benchmarks/probes/zero_draft_profile.py) feed vLLM's classes: a neutral greedy `SamplingMetadata`
and a `SpecDecodeMetadata` as vLLM builds it.
"""

from __future__ import annotations

import logging
from typing import Any

from vllm_specdec_plugin.engine import patching

# What the patched code did in this process: "plain" (zero-draft steps sampled by the plain
# sampler), "kept:<reason>" (zero-draft steps that kept the rejection path), "metadata" (written
# directly), "ngram:k=0" / "ngram:no-row" (early returns). Calls made by the probes count under
# "probe:<key>" and log nothing.
counts: dict[str, int] = {}
_probing = False


def count(key: str) -> int:
    """Count a call of the patched code (under "probe:" inside `Probing`)."""
    key = f"probe:{key}" if _probing else key
    counts[key] = counts.get(key, 0) + 1
    return counts[key]


def first(key: str, message: str, *args: Any) -> None:
    """Count `key`; log `message` the first time (INFO: engine tests read it), not in a probe."""
    if count(key) == 1 and not _probing:
        patching.log(logging.INFO, message, *args)


class Probing:
    """Calls inside count under "probe:" and log nothing."""

    def __enter__(self) -> None:
        global _probing
        _probing = True

    def __exit__(self, *exc: object) -> None:
        global _probing
        _probing = False


def probe_count(key: str) -> int:
    return counts.get(f"probe:{key}", 0)


def spec_metadata(num_draft_tokens: list[int]) -> Any:
    """A `SpecDecodeMetadata` as `_calc_spec_decode_metadata` builds it for one token per
    request plus its drafts (CPU tensors)."""
    import numpy as np
    import torch
    from vllm.v1.spec_decode.metadata import SpecDecodeMetadata

    drafts = np.asarray(num_draft_tokens, dtype=np.int32)
    sampled = drafts + 1
    cu_sampled = np.cumsum(sampled, dtype=np.int32)
    starts = cu_sampled - sampled
    target = np.concatenate([np.arange(s, s + d) for s, d in zip(starts, drafts, strict=True)]
                            + [np.zeros(0, dtype=np.int64)]).astype(np.int32)
    return SpecDecodeMetadata(
        draft_token_ids=torch.zeros(int(drafts.sum()), dtype=torch.int32),
        num_draft_tokens=drafts.tolist(),
        cu_num_draft_tokens=torch.from_numpy(np.cumsum(drafts, dtype=np.int32)),
        cu_num_sampled_tokens=torch.from_numpy(cu_sampled),
        target_logits_indices=torch.from_numpy(target),
        bonus_logits_indices=torch.from_numpy(cu_sampled - 1),
        logits_indices=torch.arange(int(cu_sampled[-1]), dtype=torch.int64))


def probe_sampling_metadata(batch: int, logprobs: int | None = None) -> Any:
    """A greedy `SamplingMetadata` for `batch` requests (no penalties, no bad words)."""
    import dataclasses

    import torch
    from vllm.v1.sample.logits_processor import LogitsProcessors
    from vllm.v1.sample.metadata import SamplingMetadata

    values = {
        "temperature": None, "all_greedy": True, "all_random": False, "top_p": None,
        "top_k": None, "generators": {}, "max_num_logprobs": logprobs, "no_penalties": True,
        "prompt_token_ids": None, "frequency_penalties": torch.zeros(batch),
        "presence_penalties": torch.zeros(batch), "repetition_penalties": torch.ones(batch),
        "output_token_ids": [[] for _ in range(batch)], "allowed_token_ids_mask": None,
        "bad_words_token_ids": {}, "logitsprocs": LogitsProcessors(),
        "spec_token_ids": [[] for _ in range(batch)]}
    names = {field.name for field in dataclasses.fields(SamplingMetadata)}
    return SamplingMetadata(**{k: v for k, v in values.items() if k in names})


def bare_ngram_proposer(proposer_cls: Any, rows: int, min_n: int, max_model_len: int,
                        k: int = 5) -> Any:
    """An `NgramProposer` with its attributes set and no JIT warm-up (its `__init__` compiles
    numba kernels): what the probes and the zero-draft profile call `propose` on."""
    import numpy as np

    proposer = proposer_cls.__new__(proposer_cls)
    for name, value in (("min_n", min_n), ("max_n", 4), ("k", k),
                        ("max_model_len", max_model_len), ("num_tokens_threshold", 8192),
                        ("num_numba_thread_available", 1),
                        ("valid_ngram_draft", np.zeros((rows, k), dtype=np.int32)),
                        ("valid_ngram_num_drafts", np.zeros(rows, dtype=np.int32))):
        setattr(proposer, name, value)
    return proposer

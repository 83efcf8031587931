"""The zero-draft shortcuts' probes (`engine/zero_draft.py`): what the patched code did,
counted, and the calls that prove each patch is what vLLM calls.

`counts` records what the patched code did in this process; a probe's own calls count apart
(under "probe:", inside `Probing`) and log nothing, so a probe can tell that vLLM's call went
through the patch. The builders make the inputs the probes (and tests/zero_draft_probe.py,
benchmarks/zero_draft_profile.py) feed vLLM's classes: a neutral greedy `SamplingMetadata` and a
`SpecDecodeMetadata` as vLLM builds it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

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


def probing() -> bool:
    return _probing


# --- the probes ----------------------------------------------------------------------------------


class _RejectionPathTaken(Exception):
    pass


SAMPLER_PROBE_EXPECTED = {"zero-draft": "plain", "zero-draft+logprobs": "rejection",
                          "one-draft": "rejection"}


def sampler_probe(rejection_sampler_cls: type) -> dict[str, str]:
    """Which sampler `rejection_sampler_cls(...)(...)` calls (through nn.Module's `__call__`, as
    the runner does) for a zero-draft step, one with logprobs requested, and one with a draft.

    The plain sampler is a `Sampler` that records how it was called: the rejection path calls it
    for the bonus token (`predict_bonus_token=True`) and is stopped there, so no kernel runs.
    """
    import torch
    from vllm.v1.outputs import SamplerOutput
    from vllm.v1.sample.sampler import Sampler

    class Recorder(Sampler):
        def forward(self, logits: Any, sampling_metadata: Any, predict_bonus_token: bool = False,
                    logprobs_mode_override: Any = None) -> Any:
            if predict_bonus_token:
                raise _RejectionPathTaken
            return SamplerOutput(
                sampled_token_ids=logits.argmax(dim=-1).to(torch.int32).unsqueeze(-1),
                logprobs_tensors=None)

    sampler = rejection_sampler_cls(Recorder())
    logits = torch.tensor([[0.0, 2.0, 1.0], [3.0, 0.0, 1.0]])
    cases = {"zero-draft": ([0, 0], None), "zero-draft+logprobs": ([0, 0], 1),
             "one-draft": ([1, 0], None)}
    found = {}
    for case, (drafts, logprobs) in cases.items():
        rows = logits if sum(drafts) == 0 else torch.cat([logits[:1], logits])
        before = probe_count("plain")
        try:
            with Probing():
                out = sampler(spec_metadata(drafts), None, rows,
                              probe_sampling_metadata(2, logprobs))
        except _RejectionPathTaken:
            found[case] = "rejection"
            continue
        tokens = out.sampled_token_ids.flatten().tolist()
        if probe_count("plain") == before:
            found[case] = "plain, not through the patch"
        else:
            found[case] = "plain" if tokens == [1, 0] else f"plain, wrong tokens {tokens}"
    return found


def metadata_probe(runner_cls: Any, original: Callable[..., Any]) -> list[str]:
    """Differences between `runner_cls._calc_spec_decode_metadata` (what the runner calls) and
    vLLM's `original`, field by field, on zero-draft and drafted steps; [] when none, and a
    problem when the patched method is not what the runner calls."""
    import types

    import numpy as np
    import torch

    def runner() -> Any:
        fake = types.SimpleNamespace(
            arange_np=np.arange(64), _arange_scratch=np.zeros(64, dtype=np.int64),
            device=torch.device("cpu"),
            input_ids=types.SimpleNamespace(gpu=torch.arange(100, 164, dtype=torch.int32)))
        fake._get_cumsum_and_arange = functools.partial(runner_cls._get_cumsum_and_arange, fake)
        return fake

    problems = []
    before = probe_count("metadata")
    for drafts, scheduled in (([0, 0, 0], [1, 1, 1]), ([0, 0, 0, 0], [5, 1, 1, 2]),
                              ([2, 0, 1], [3, 1, 2])):
        draft_np = np.asarray(drafts, dtype=np.int32)
        cu = np.cumsum(np.asarray(scheduled, dtype=np.int32))
        with Probing():
            ours = runner_cls._calc_spec_decode_metadata(runner(), draft_np, cu)
        theirs = original(runner(), draft_np, cu)
        for field in ("draft_token_ids", "cu_num_draft_tokens", "cu_num_sampled_tokens",
                      "target_logits_indices", "bonus_logits_indices", "logits_indices"):
            a, b = getattr(ours, field), getattr(theirs, field)
            if a.dtype != b.dtype or a.device != b.device or not torch.equal(a, b):
                problems.append(f"{field} for drafts {drafts}: {a} vs {b}")
        if (ours.num_draft_tokens, ours.max_spec_len) != (theirs.num_draft_tokens,
                                                          theirs.max_spec_len):
            problems.append(f"num_draft_tokens for drafts {drafts}")
    if probe_count("metadata") - before != 2:
        problems.append("the runner's _calc_spec_decode_metadata is not the patched one")
    return problems


def ngram_probe(proposer_cls: Any) -> bool:
    """An `NgramProposer` (attributes only, no JIT) answers k=0 and all-rows-skipped steps
    through the patched method: one empty draft per row, counted."""
    import numpy as np

    proposer = proposer_cls.__new__(proposer_cls)
    proposer.k, proposer.max_model_len = 5, 8
    tokens = np.zeros((2, 8), dtype=np.int32)
    before = probe_count("ngram:k=0"), probe_count("ngram:no-row")
    with Probing():
        at_k0 = proposer.propose(0, [[1], [2]], np.array([3, 3]), tokens)
        no_row = proposer.propose(5, [[], [2]], np.array([3, 8]), tokens)
    after = probe_count("ngram:k=0"), probe_count("ngram:no-row")
    return at_k0 == [[], []] and no_row == [[], []] and after == (before[0] + 1, before[1] + 1)


# --- the inputs they build ---------------------------------------------------------------------


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

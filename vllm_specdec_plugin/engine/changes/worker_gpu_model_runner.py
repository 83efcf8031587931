"""Changes to vLLM's V1 model runner (`vllm.v1.worker.gpu_model_runner.GPUModelRunner`; the
CPU runner inherits each method), applied when vLLM imports the runner's module (the CPU
generator fix: the CPU runner's module, which imports this one first).

- `zero-draft-spec-metadata` (shortcut): with no draft token the spec-decode metadata is
  written directly (every field holds the value and dtype vLLM computes; `metadata_probe`
  compares them field by field with vLLM's own method). The metadata itself is still built: the
  speculative path (drafters, attention backends, async scheduling) keeps it (docs/zero-draft.md).
- `adaptive-request-limits` (shortcut: not a bug fix, tested on vLLM 0.32 and 0.33): vLLM's
  scheduler trims a draft to `max_model_len` only, so tokens drafted past a request's
  `max_tokens` are verified and thrown away, and a `custom_class` drafter sees token arrays, not
  requests. Before the runner's `propose_draft_token_ids` asks a drafter that declares
  `wants_request_limits` (the adaptive proposer), the drafter's `request_limits` is set to (the
  input batch's request ids by row, the runner's request states): two references, no copy
  (`proposer/rows.py` reads them). Every other drafter is called exactly as before; proven in a
  real engine by tests/engine/test_adaptive.py.
- `cpu-generator-rewind` (bug fix, CPU platform): a step that prefills part of a prompt still
  samples a token vLLM discards, and `_bookkeeping_sync` rewinds the seeded generator with
  `set_offset`, which a CPU generator refuses: one seeded prompt longer than the token budget
  killed the engine core (docs/reliability.md, "Seeded requests and chunked prefill"). For one
  `sample_tokens` call the CPU generators of the rows vLLM discards are taken out of the input
  batch's `generators` and put back after it, also on error: their noise comes from the default
  generator, the seeded generator does not advance (what vLLM's rewind aims at) and the rewind
  loop finds nothing to rewind. The first protected row's generator state is checked (restored,
  with a WARNING, if any code still drew from it). Applied when vLLM imports the CPU runner's
  module, and proven on `CPUModelRunner.sample_tokens` (what vLLM's CPU worker calls).
"""

from __future__ import annotations

import functools
import inspect
import logging
from collections.abc import Callable, Iterator, MutableMapping
from contextlib import contextmanager
from typing import Any

from vllm_specdec_plugin.engine import patching
from vllm_specdec_plugin.engine.changes.probing import Probing, first, probe_count
from vllm_specdec_plugin.engine.patching import Change, apply_patch, prove

MODULE = "vllm.v1.worker.gpu_model_runner"
CPU_RUNNER_MODULE = "vllm.v1.worker.cpu_model_runner"
METADATA_PARAMETERS = ["self", "num_draft_tokens", "cu_num_scheduled_tokens"]
REQUEST_LIMITS_PARAMETERS = [
    "self", "scheduler_output", "sampled_token_ids", "sampling_metadata", "hidden_states",
    "sample_hidden_states", "aux_hidden_states", "spec_decode_metadata", "common_attn_metadata",
    "slot_mappings"]
_first_protected = [True]  # the one-time state check and INFO line, per process


# --- zero-draft-spec-metadata --------------------------------------------------------------------


def _patch_metadata(announce: bool) -> None:
    import numpy as np
    from vllm.utils.torch_utils import async_tensor_h2d
    from vllm.v1.spec_decode.metadata import SpecDecodeMetadata
    from vllm.v1.worker import gpu_model_runner as module

    owner = module.GPUModelRunner
    original = patching.checked_original(owner, "_calc_spec_decode_metadata",
                                         METADATA_PARAMETERS)

    @functools.wraps(original)
    def _calc_spec_decode_metadata(self: Any, num_draft_tokens: Any,
                                   cu_num_scheduled_tokens: Any) -> Any:
        if num_draft_tokens.shape[0] == 0 or num_draft_tokens.any():
            return original(self, num_draft_tokens, cu_num_scheduled_tokens)
        first("metadata", "vllm-specdec-plugin: %s: a step without draft tokens got its "
               "spec-decode metadata written directly", SPEC_METADATA.name)
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

    if not apply_patch(SPEC_METADATA.patch(
            owner, "_calc_spec_decode_metadata", "a step without draft tokens gets its "
            "spec-decode metadata written directly (the values and dtypes vLLM computes), "
            "without vLLM's per-token index arithmetic"), _calc_spec_decode_metadata,
            announce=announce):
        return
    problems = metadata_probe(module.GPUModelRunner, original)
    if problems:
        patching.log(logging.WARNING, "vllm-specdec-plugin: %s differs from vLLM's own: %s",
                     SPEC_METADATA.name, "; ".join(problems))
    prove(SPEC_METADATA, lambda: bool(problems),
          f"{MODULE}.GPUModelRunner._calc_spec_decode_metadata", announce)


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


# --- adaptive-request-limits ---------------------------------------------------------------------


def _patch_propose_draft_token_ids(announce: bool) -> None:
    from vllm.v1.worker import gpu_model_runner as module

    owner = module.GPUModelRunner
    original = patching.checked_original(owner, "propose_draft_token_ids",
                                         REQUEST_LIMITS_PARAMETERS)

    @functools.wraps(original)
    def propose_draft_token_ids(self: Any, *args: Any, **kwargs: Any) -> Any:
        drafter = getattr(self, "drafter", None)
        if drafter is not None and getattr(drafter, "wants_request_limits", False):
            drafter.request_limits = (self.input_batch.req_ids, self.requests)
        return original(self, *args, **kwargs)

    apply_patch(REQUEST_LIMITS.patch(
        owner, "propose_draft_token_ids",
        "tell the adaptive proposer each request's max_tokens (vLLM verifies drafts past it)"),
        propose_draft_token_ids, announce=announce)


# --- cpu-generator-rewind ------------------------------------------------------------------------


def offset_rewind_fails(generator: Any) -> bool:
    """Whether `generator` refuses vLLM's rewind (`set_offset(get_offset() - 4)`)."""
    try:
        generator.set_offset(generator.get_offset())
    except RuntimeError:
        return True
    return False


def bug_shows() -> bool:
    """vLLM's runner rewinds discarded samples by offset, and this platform's generators (CPU)
    have none."""
    import torch
    from vllm.platforms import current_platform
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    rewinds = "set_offset" in inspect.getsource(GPUModelRunner._bookkeeping_sync)
    return (current_platform.is_cpu() and rewinds
            and offset_rewind_fails(torch.Generator(device="cpu")))


@contextmanager
def discarded_rows_unseeded(generators: MutableMapping[int, Any],
                            discarded: Callable[[int], bool]) -> Iterator[dict[int, Any]]:
    """Take out of `generators` (row -> generator) the offset-less generators of the rows whose
    sample is `discarded`, and put them back at the same rows afterwards, also on error."""
    taken = {row: gen for row, gen in list(generators.items())
             if gen.device.type == "cpu" and discarded(row)}
    for row in taken:
        del generators[row]
    try:
        yield taken
    finally:
        generators.update(taken)


def _patch_sample_tokens(announce: bool) -> None:
    from vllm.v1.worker import gpu_model_runner as module

    if not bug_shows():
        return
    owner = module.GPUModelRunner
    original = patching.checked_original(owner, "sample_tokens", ["self", "grammar_output"])

    @functools.wraps(original)
    def sample_tokens(self: Any, grammar_output: Any) -> Any:
        batch = self.input_batch
        if self.execute_model_state is None or not batch.generators:
            return original(self, grammar_output)
        mask = self.discard_request_mask.np[:batch.num_reqs]
        with discarded_rows_unseeded(batch.generators,
                                     lambda row: row < len(mask) and bool(mask[row])) as taken:
            states = ({row: gen.get_state() for row, gen in taken.items()}
                      if taken and _first_protected[0] else None)
            output = original(self, grammar_output)
        if states is not None:
            _check_untouched(taken, states, announce)
        return output

    if not apply_patch(CPU_GENERATOR_REWIND.patch(
            owner, "sample_tokens", "a seeded row whose sampled token is discarded (a prompt "
            "prefilled in chunks) is sampled without its CPU generator, which vLLM would rewind "
            "with set_offset (CPU generators have no offset: the engine core died)"),
            sample_tokens, announce=announce):
        return
    from vllm.v1.worker.cpu_model_runner import CPUModelRunner

    # What the CPU worker's `self.model_runner.sample_tokens(...)` resolves to.
    prove(CPU_GENERATOR_REWIND,
          lambda: inspect.getattr_static(CPUModelRunner, "sample_tokens") is not sample_tokens,
          f"{CPU_RUNNER_MODULE}.CPUModelRunner.sample_tokens", announce)


def _check_untouched(taken: dict[int, Any], states: dict[int, Any], announce: bool) -> None:
    import torch

    _first_protected[0] = False
    moved = [row for row, gen in taken.items() if not torch.equal(gen.get_state(), states[row])]
    for row in moved:
        taken[row].set_state(states[row])
    if moved:
        patching.log(logging.WARNING, "vllm-specdec-plugin: %s: a sampler drew from a seeded "
                     "generator vLLM discards the sample of; its state was restored",
                     CPU_GENERATOR_REWIND.name)
        return
    patching.log(patching.level(announce), "vllm-specdec-plugin: %s: a seeded row's discarded "
                 "sample left its generator where it was (checked in sample_tokens)",
                 CPU_GENERATOR_REWIND.name)


SPEC_METADATA = Change(
    name="zero-draft-spec-metadata", kind="shortcut",
    targets=(f"{MODULE}.GPUModelRunner._calc_spec_decode_metadata",), tested_on=("0.32", "0.33"),
    apply=_patch_metadata, without="zero-draft steps keep vLLM's speculative path",
    trigger=MODULE)
REQUEST_LIMITS = Change(
    name="adaptive-request-limits", kind="shortcut",
    targets=(f"{MODULE}.GPUModelRunner.propose_draft_token_ids",), tested_on=("0.32", "0.33"),
    apply=_patch_propose_draft_token_ids,
    without="the adaptive proposer may draft past a request's max_tokens", trigger=MODULE)
CPU_GENERATOR_REWIND = Change(
    name="cpu-generator-rewind", kind="bug-fix",
    targets=(f"{MODULE}.GPUModelRunner.sample_tokens",), tested_on=("0.32",),
    apply=_patch_sample_tokens,
    without="a seeded request whose prompt is prefilled in chunks kills the engine core",
    # The CPU runner's module: it imports this one first, and its class is where the fix is
    # proven (the CPU worker calls CPUModelRunner.sample_tokens, inherited).
    trigger=CPU_RUNNER_MODULE)

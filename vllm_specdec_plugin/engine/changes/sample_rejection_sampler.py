"""Changes to vLLM's rejection sampler (`vllm.v1.sample.rejection_sampler`).

- `cpu-expand-kernel` (bug fix, CPU builds of vLLM without Triton): the CPU stand-in for the
  sampler's `expand_kernel` (`cpu_triton_utils._expand_kernel_impl`, what the CPU platform
  registers) wrote an int64 copy of its float32/int32 output, leaving per-token
  temperature/top-k/top-p uninitialised. Proven through `expand_batch_to_tokens`, right after
  the platform registers its kernels (`cpu-expand-kernel-proof` wraps that registration) or,
  where vLLM registered the broken kernel before the plugin loaded, through vLLM's own
  kernel-override registry; undone with everything it registered (`patching.on_restore`).
- `zero-draft-plain-sampler` (shortcut): a step with no draft token (`metadata.max_spec_len ==
  0`, one logits row per request) is sampled by the rejection sampler's own plain `Sampler`,
  exactly as the runner samples without a speculative config, only when every sampling field
  and rejection-sampler setting is known to be neutral (`sample_rejection_sampler_guard.py`).
  With zero drafts the bonus indices are every row in order, so greedy and per-request-seeded
  requests get the plain sampler's tokens by construction; unseeded sampled requests draw from
  the global RNG as without speculation (docs/zero-draft.md). Proven by `sampler_probe`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from vllm_specdec_plugin.engine import patching
from vllm_specdec_plugin.engine.changes.probing import (
    Probing,
    first,
    probe_count,
    probe_sampling_metadata,
    spec_metadata,
)
from vllm_specdec_plugin.engine.changes.sample_rejection_sampler_guard import (
    rejection_path_needed,
)
from vllm_specdec_plugin.engine.patching import Change, apply_patch, on_restore, prove, restore

MODULE = "vllm.v1.sample.rejection_sampler"
EXPAND_PROOF = "cpu-expand-kernel-proof"
EXPAND_KERNEL = f"{MODULE}.expand_kernel"
SAMPLER_PARAMETERS = ["self", "metadata", "draft_probs", "logits", "sampling_metadata"]


# --- cpu-expand-kernel ---------------------------------------------------------------------------


def expand_fixed(output: Any, input_val: Any, cu_num_tokens: Any, replace_from: Any,
                 replace_to: Any, MAX_NUM_TOKENS: Any = None) -> None:  # noqa: N803
    """expand_kernel's contract, written into the caller's tensor (any dtype)."""
    import torch

    ends = cu_num_tokens.to(torch.int64)
    counts = torch.diff(ends, prepend=ends.new_zeros(1))
    values = torch.where(input_val == replace_from, torch.full_like(input_val, replace_to),
                         input_val)
    total = int(ends[-1]) if ends.numel() else 0
    output[:total] = torch.repeat_interleave(values, counts).to(output.dtype)


def expand_impl_is_broken(impl: Callable[..., None]) -> bool:
    """Whether an expand implementation leaves a float32 output unwritten."""
    import torch

    values = torch.rand(2) + 1  # fresh values: leftover memory cannot match them by chance
    output = torch.full((3,), -1.0)
    impl(output, values, torch.tensor([1, 3], dtype=torch.int32), 0, 0)
    return not torch.equal(output, values[[0, 1, 1]])


def expand_is_broken_where_vllm_calls_it() -> bool:
    """The rejection sampler's own `expand_batch_to_tokens` (temperature/top-k/top-p per token).

    Raises when the platform has not registered its kernel overrides in this process yet.
    """
    import torch
    from vllm.v1.sample import rejection_sampler

    values = torch.rand(2) + 1
    expanded = rejection_sampler.expand_batch_to_tokens(
        values, torch.tensor([1, 3], dtype=torch.int32), 3)
    return not torch.equal(expanded, values[[0, 1, 1]])


def _cpu_without_triton() -> bool:
    from vllm.platforms import current_platform
    from vllm.triton_utils import HAS_TRITON

    return current_platform.is_cpu() and not HAS_TRITON


def _fix_cpu_expand_kernel(announce: bool) -> None:
    if not _cpu_without_triton():
        return
    from vllm.platforms import current_platform
    from vllm.utils import cpu_triton_utils as cpu_tl

    current_platform.import_kernels()  # torch.ops._C.expand_kernel_impl
    vllm_impl = cpu_tl._expand_kernel_impl
    if not expand_impl_is_broken(vllm_impl):
        return
    # The implementation the CPU platform registers for the sampler's expand_kernel.
    apply_patch(EXPAND_FIX.patch(
        cpu_tl, "_expand_kernel_impl", "it wrote an int64 copy of the rejection sampler's "
        "float32/int32 output, leaving per-token temperature/top-k/top-p uninitialised"),
        expand_fixed, announce=announce)
    try:
        expand_is_broken_where_vllm_calls_it()
    except Exception:  # no kernel overrides registered yet: prove it once they are
        _prove_expand_after_registration(type(current_platform), vllm_impl, announce)
        return
    _prove_expand(announce)


def _prove_expand_after_registration(platform_cls: type, vllm_impl: Callable[..., None],
                                     announce: bool) -> None:
    owner = next(c for c in platform_cls.__mro__ if "register_triton_kernel_overrides" in vars(c))
    original = vars(owner)["register_triton_kernel_overrides"].__func__

    def register_triton_kernel_overrides(cls: type) -> None:
        original(cls)
        entry = _kernel_state(EXPAND_KERNEL)[0]
        if patching.in_place(EXPAND_FIX.name) and entry is not None and entry[1] is expand_fixed:
            # The platform registered the patched attribute: undoing the fix must register
            # vLLM's own implementation, as the platform would have without the plugin.
            on_restore(EXPAND_FIX.name, functools.partial(_register_as_vllm, EXPAND_KERNEL,
                                                          entry[0], vllm_impl))
        _prove_expand(announce)

    if apply_patch(patching.Patch(EXPAND_PROOF, owner, "register_triton_kernel_overrides",
                                  f"proves {EXPAND_FIX.name} through the rejection sampler once "
                                  "the platform has registered its kernels"),
                   classmethod(functools.wraps(original)(register_triton_kernel_overrides)),
                   announce=announce):
        on_restore(EXPAND_FIX.name, functools.partial(restore, EXPAND_PROOF))


def _prove_expand(announce: bool) -> None:
    """The sampler's call site must see the fix; if vLLM registered the broken kernel before the
    plugin loaded, register the fix through vLLM's own kernel-override registry."""
    if expand_is_broken_where_vllm_calls_it():
        from vllm.triton_utils.dispatcher import register_kernels

        before = _kernel_state(EXPAND_KERNEL)
        register_kernels({EXPAND_KERNEL: expand_fixed})
        on_restore(EXPAND_FIX.name, functools.partial(_set_kernel_state, EXPAND_KERNEL, *before))
    prove(EXPAND_FIX, expand_is_broken_where_vllm_calls_it, f"{MODULE}.expand_batch_to_tokens",
          announce)


def _kernel_state(name: str) -> tuple[Any, Any]:
    """vLLM's kernel-override registry entry for kernel `name` (None: none) and the object its
    module holds under that name now (`vllm/triton_utils/dispatcher.py`)."""
    from vllm.triton_utils import dispatcher

    host, attr = dispatcher._resolve_kernel(name)
    return dispatcher._registry.get(name), getattr(host, attr)


def _set_kernel_state(name: str, entry: Any, kernel: Any) -> None:
    """Put kernel `name` back: the registry holds `entry` (None: no entry) and every holder of
    the current kernel object (module attributes, JIT launchers' `kernel`) holds `kernel`, by
    the dispatcher's own rebinding pass, as `register_kernels` binds an override."""
    from vllm.triton_utils import dispatcher

    host, attr = dispatcher._resolve_kernel(name)
    current = getattr(host, attr)
    if current is not kernel:
        dispatcher._rebind_kernels([(current, kernel)])
        setattr(host, attr, kernel)
    if entry is None:
        dispatcher._registry.pop(name, None)
    else:
        dispatcher._registry[name] = entry


def _register_as_vllm(name: str, triton_kernel: Any, impl: Callable[..., None]) -> None:
    """Kernel `name` overridden by `impl`, as `register_kernels` would have registered it."""
    from vllm.triton_utils.dispatcher import KernelOverride

    _set_kernel_state(name, (triton_kernel, impl), KernelOverride(triton_kernel, impl))


# --- zero-draft-plain-sampler ------------------------------------------------------------------


def _patch_sampler(announce: bool) -> None:
    from vllm.v1.sample import rejection_sampler as module

    owner = module.RejectionSampler
    original = patching.checked_original(owner, "forward", SAMPLER_PARAMETERS)

    @functools.wraps(original)
    def forward(self: Any, metadata: Any, draft_probs: Any, logits: Any,
                sampling_metadata: Any) -> Any:
        if metadata.max_spec_len == 0 and logits.shape[0] == len(metadata.num_draft_tokens):
            reason = rejection_path_needed(self, sampling_metadata)
            if reason is None:
                first("plain", "vllm-specdec-plugin: %s: a step without draft tokens was "
                      "sampled by the plain sampler", PLAIN_SAMPLER.name)
                return self.sampler(logits=logits, sampling_metadata=sampling_metadata)
            first(f"kept:{reason}", "vllm-specdec-plugin: %s: a step without draft tokens "
                  "kept the rejection sampler (for %s)", PLAIN_SAMPLER.name, reason)
        return original(self, metadata, draft_probs, logits, sampling_metadata)

    reason = ("a step without draft tokens is sampled by the plain sampler, as without a "
              "speculative config (no bonus-logits gather, raw-logits copy or recovered-token "
              "draw) when every sampling feature is known to be neutral")
    if apply_patch(PLAIN_SAMPLER.patch(owner, "forward", reason), forward, announce=announce):
        prove(PLAIN_SAMPLER,
              lambda: sampler_probe(module.RejectionSampler) != SAMPLER_PROBE_EXPECTED,
              f"{MODULE}.RejectionSampler.__call__", announce)


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


EXPAND_FIX = Change(
    name="cpu-expand-kernel", kind="bug-fix",
    targets=("vllm.utils.cpu_triton_utils._expand_kernel_impl",
             "vllm.platforms.cpu.CpuPlatform.register_triton_kernel_overrides"),
    tested_on=("0.32",), apply=_fix_cpu_expand_kernel,
    without="the bug remains: speculative decoding with sampling requests may fail")
PLAIN_SAMPLER = Change(
    name="zero-draft-plain-sampler", kind="shortcut",
    targets=(f"{MODULE}.RejectionSampler.forward",), tested_on=("0.32", "0.33"),
    apply=_patch_sampler, without="zero-draft steps keep vLLM's speculative path",
    trigger=MODULE)

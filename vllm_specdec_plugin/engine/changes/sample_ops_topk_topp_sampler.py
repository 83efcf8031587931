"""Changes to vLLM's top-k/top-p sampler (`vllm.v1.sample.ops.topk_topp_sampler`).

`top-k-empty-batch` (bug fix, every platform: plain PyTorch code, which vLLM 0.32 reaches where
Triton is absent): `apply_top_k_only` called `k.max()` on an empty batch (a step without draft
tokens), so one `top_k` request killed the engine core. Probed and proven through
`apply_top_k_top_p_pytorch`, the function vLLM's sampler calls.
"""

from __future__ import annotations

import functools
from typing import Any

from vllm_specdec_plugin.engine.patching import Change, apply_patch, prove

MODULE = "vllm.v1.sample.ops.topk_topp_sampler"


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

    if not top_k_is_broken():
        return
    original = sampler.apply_top_k_only

    @functools.wraps(original)
    def apply_top_k_only(logits: Any, k: Any) -> Any:
        return logits if k.numel() == 0 else original(logits, k)

    apply_patch(TOP_K_FIX.patch(sampler, "apply_top_k_only",
                                "k.max() on an empty batch (a step without draft tokens) killed "
                                "the engine core on one top_k request"),
                apply_top_k_only, announce=announce)
    prove(TOP_K_FIX, top_k_is_broken, f"{MODULE}.apply_top_k_top_p_pytorch", announce)


TOP_K_FIX = Change(
    name="top-k-empty-batch", kind="bug-fix", targets=(f"{MODULE}.apply_top_k_only",),
    tested_on=("0.32",), apply=_fix_top_k_on_empty_batch,
    without="the bug remains: one top_k request on a step without draft tokens may kill the "
    "engine core")

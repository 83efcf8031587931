"""The vLLM CPU bug fixes: each probe sees the bug in the installed vLLM, the fix removes it."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("vllm._C")
from vllm.utils import cpu_triton_utils as cpu_tl  # noqa: E402
from vllm.v1.sample.ops import topk_topp_sampler as sampler  # noqa: E402

from vllm_specdec_plugin import vllm_fixes  # noqa: E402


@pytest.mark.parametrize("dtype", [torch.float32, torch.int32, torch.int64])
def test_fixed_expand_matches_the_kernel_contract(dtype):
    output = torch.full((6,), -7, dtype=dtype)
    values = torch.tensor([3, 0, 5], dtype=dtype)
    vllm_fixes._expand_fixed(output, values, torch.tensor([2, 3, 5], dtype=torch.int32), 0, 9)
    assert output.tolist() == [3, 3, 9, 5, 5, -7]  # 0 -> 9 (replace_from -> replace_to)


def test_fixes_applied_only_where_the_bug_is():
    broken_before = vllm_fixes._expand_is_broken(cpu_tl)
    applied = vllm_fixes.apply_fixes()
    assert ("cpu-expand-kernel" in applied) == broken_before
    assert not vllm_fixes._expand_is_broken(cpu_tl)
    empty = sampler.apply_top_k_only(torch.zeros((0, 4)), torch.empty((0,), dtype=torch.int64))
    assert empty.shape == (0, 4)
    assert vllm_fixes.apply_fixes() is applied  # idempotent

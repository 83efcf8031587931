"""The KV capacity of one GPU (`core/kv_capacity.py`): the arithmetic by hand on a small shape,
a sliding-window shape, weights that do not fit, and the issue's 8B examples (L4 at batch 1024
does not fit, H100 SXM at batch 8 does)."""

from __future__ import annotations

import pytest

from vllm_specdec_plugin.core.kv_capacity import GIB, KvCapacity, kv_capacity
from vllm_specdec_plugin.core.roofline import ModelShape, count_parameters
from vllm_specdec_plugin.inputs.hardware import find_hardware

# 1 GiB of weights at 2 bytes; 4 layers x 2 KV heads x 64 x 2 bytes x 2 (K and V) = 2 KiB a token
SMALL = ModelShape(parameters=1 << 29, active_parameters=1 << 29, layers=4, hidden=256, heads=4,
                   kv_heads=2, head_dim=64, intermediate=512, vocab=1000, name="small")


def llama_8b() -> ModelShape:
    total, active, _ = count_parameters(layers=32, hidden=4096, heads=32, kv_heads=8,
                                        head_dim=128, intermediate=14336, vocab=128256,
                                        tied=False)
    return ModelShape(total, active, 32, 4096, 32, 8, 128, 14336, 128256, name="Llama-3.1-8B")


def test_capacity_by_hand():
    # 10 GiB x 0.9 = 9 GiB, less 1 GiB of weights and the 2 GiB reserve: 6 GiB of cache;
    # a request of 1024 tokens holds 1024 x 2 KiB = 2 MiB: 3072 requests
    found = kv_capacity(SMALL, 10.0, 1024)
    assert found == KvCapacity(10.0, 1.0, 2.0, 0.9, 6.0, 1024, 2.0 / 1024, 3072)
    assert found.weights_fit and found.fits(3072) and not found.fits(3073)
    # the utilization and reserve are parameters
    assert kv_capacity(SMALL, 10.0, 1024, gpu_memory_utilization=0.5, reserve_gib=1.0
                       ).requests == 3 * 512


def test_a_sliding_window_layer_holds_at_most_its_window():
    sliding = ModelShape(**{**SMALL.__dict__, "sliding_layers": 2, "sliding_window": 256})
    # 2 full layers x 512 B x 1024 tokens + 2 sliding layers x 512 B x 256 tokens = 1.25 MiB
    assert kv_capacity(sliding, 10.0, 1024).request_gib * GIB == 1.25 * (1 << 20)
    assert kv_capacity(sliding, 10.0, 1024).requests == int(6 * 1024 / 1.25)


def test_weights_that_do_not_fit_hold_nothing():
    found = kv_capacity(SMALL, 3.0, 1024)  # 2.7 GiB less 1 and 2 GiB
    assert not found.weights_fit and found.requests == 0 and not found.fits(1)
    with pytest.raises(ValueError, match="need memory > 0"):
        kv_capacity(SMALL, 0.0, 1024)


def test_an_8b_model_on_an_l4_holds_far_fewer_than_1024_requests():
    shape, tokens = llama_8b(), 600 + 6
    l4 = kv_capacity(shape, find_hardware("l4").memory_gib or 0, tokens)
    assert l4.weights_gib == pytest.approx(14.96, abs=0.01)
    # 24 x 0.9 - 14.96 - 2 = 4.64 GiB at 128 KiB a token (0.074 GiB a request): 62 requests
    assert l4.requests == 62 and not l4.fits(1024)
    h100 = kv_capacity(shape, find_hardware("h100-sxm").memory_gib or 0, tokens)
    # 80 x 0.9 - 14.96 - 2 = 55.04 GiB: 744 requests
    assert h100.fits(8) and h100.requests == 744


def test_docs_quote_these_figures():
    from pathlib import Path

    from vllm_specdec_plugin.core.curve_error import curve_error

    text = " ".join((Path(__file__).resolve().parents[3] / "docs/whatif.md").read_text().split())
    shape, tokens = llama_8b(), 606
    l4 = kv_capacity(shape, find_hardware("l4").memory_gib or 0, tokens).requests
    h100 = kv_capacity(shape, find_hardware("h100-sxm").memory_gib or 0, tokens).requests
    assert (f"({shape.weight_bytes / GIB:.1f} GiB of bf16 weights) at ~{tokens} tokens a "
            f"request, an L4 holds {l4} requests and an H100 SXM {h100}") in text
    error = curve_error(find_hardware("cpu"), False).error or 0
    assert f"the `cpu` row: +/-{error:.1%} per step" in text
    assert f"either way (x{(1 + error) / (1 - error):.2f} here)" in text

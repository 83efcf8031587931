"""The roofline prior (`core/roofline.py`) against vLLM RFC #48627 (H100 NVL, Gemma-4-31B FP8,
MTP K=3: 1.79x at 30 concurrent, 1.00x at 128), out of sample for the step model, with the
errors in the test names. The RFC's acceptance and context lengths could not be read from the
stored copy of the issue (only its summary): 2.83 tokens per step is assumed from the
per-position acceptance 0.844, 0.599, 0.385 that eugr/spark-vllm-docker#343 reports for Gemma 4
MTP, and context 512 from the RFC's short-context rows (spec off at batch 65-256 for context
<= 768). The rest of the roofline's checks: tests/unit/core/test_roofline.py.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from vllm_specdec_plugin.core.roofline import (
    ModelShape,
    count_parameters,
    draft_position_seconds,
    roofline_curve,
    step_seconds,
)
from vllm_specdec_plugin.inputs.hardware import find_hardware
from vllm_specdec_plugin.inputs.model_shape import shape_from_config

ROOT = Path(__file__).resolve().parents[3]


GEMMA4_31B = {  # google/gemma-4-31B-it config.json (text part) with an FP8-Dynamic quantization
    "architectures": ["Gemma4ForConditionalGeneration"], "model_type": "gemma4",
    "tie_word_embeddings": True,
    "text_config": {
        "model_type": "gemma4_text", "hidden_size": 5376, "num_hidden_layers": 60,
        "intermediate_size": 21504, "num_attention_heads": 32, "num_key_value_heads": 16,
        "num_global_key_value_heads": 4, "head_dim": 256, "global_head_dim": 512,
        "vocab_size": 262144, "max_position_embeddings": 262144, "sliding_window": 1024,
        "attention_k_eq_v": True, "tie_word_embeddings": True, "enable_moe_block": False,
        "layer_types": (["sliding_attention"] * 5 + ["full_attention"]) * 10},
    "quantization_config": {
        "quant_method": "compressed-tensors", "ignore": ["lm_head"],
        "config_groups": {"group_0": {"weights": {"num_bits": 8, "type": "float"},
                                      "input_activations": {"num_bits": 8, "type": "float"}}}}}
K, TOKENS_PER_STEP, CONTEXT = 3, 1 + 0.844 + 0.599 + 0.385, 512


def gemma4_assistant() -> ModelShape:
    """google/gemma-4-31B-it-assistant: 4 layers of hidden 1024 (3 sliding, 1 full), q-only
    attention over the target's cache, MLP 8192, its own tied 262144-token head, and
    projections from and to the target's 5376 (the config values other projects' tests copy)."""
    total, active, _ = count_parameters(layers=4, hidden=1024, heads=32, kv_heads=0,
                                        head_dim=256, intermediate=8192, vocab=262144,
                                        tied=True, global_layers=1, global_head_dim=512)
    projections = 3 * 5376 * 1024
    return ModelShape(total + projections, active + projections, 4, 1024, 32, 16, 256, 8192,
                      262144, tied_embeddings=True, sliding_layers=3, sliding_window=1024,
                      global_kv_heads=4, global_head_dim=512, name="assistant")


def rfc_speedup(rows, hw=None, context=CONTEXT, per_step=TOKENS_PER_STEP):
    """tokens per step * t(rows, 1 token/row) / t(rows, 1+K tokens/row, K draft positions)."""
    hw = hw or find_hardware("h100-nvl")
    gemma = shape_from_config(GEMMA4_31B, "gemma-4-31B", "gemma-4-31B-it FP8")
    base = step_seconds(gemma, hw, rows, 1, context)
    spec = (step_seconds(gemma, hw, rows, 1 + K, context) + hw.switch_share * base
            + K * draft_position_seconds(gemma4_assistant(), hw, rows, context))
    return per_step * base / spec


def test_rfc48627_gemma4_31b_mtp3_30_concurrent_1_75x_vs_1_79x_minus_2pct():
    """Predicted 1.747x against the RFC's 1.79x (-2.4%); -5.2% / +0.0% at context 256 / 768.
    Within 6%: the unread context moves it by 5% either way."""
    assert rfc_speedup(30) == pytest.approx(1.747, abs=0.005)
    for context in (256, 512, 768):
        assert abs(rfc_speedup(30, context=context) / 1.79 - 1) < 0.06


def test_rfc48627_gemma4_31b_mtp3_128_concurrent_1_34x_vs_1_00x_plus_34pct():
    """Predicted 1.338x against the RFC's 1.00x: the prior is optimistic at high batch (+34%;
    +21% / +44% at context 256 / 768; with the acceptance implied by the 30-concurrent point,
    2.90 tokens per step, 1.37x). Asserted: the figure, and that the prior still ranks 128
    far below 30 (what a break point needs)."""
    assert rfc_speedup(128) == pytest.approx(1.338, abs=0.005)
    implied = 1.79 / (rfc_speedup(30) / TOKENS_PER_STEP)
    assert implied == pytest.approx(2.898, abs=0.005)
    assert rfc_speedup(128, per_step=implied) == pytest.approx(1.371, abs=0.005)
    assert rfc_speedup(128) < rfc_speedup(30) - 0.35


def test_rfc48627_fp8_at_its_peak_would_overpredict_by_14_and_63pct():
    """Why FP8 matmuls are priced at the BF16 rate (`fp8_flops_efficiency`): at the FP8 peak
    with the BF16 efficiency the two points come out 2.03x (+14%) and 1.63x (+63%)."""
    nvl = find_hardware("h100-nvl")
    peak = replace(nvl, fp8_flops_efficiency=nvl.flops_efficiency)
    assert rfc_speedup(30, peak) == pytest.approx(2.034, abs=0.005)
    assert rfc_speedup(128, peak) == pytest.approx(1.629, abs=0.005)


def test_rfc48627_through_the_prior_curve_at_bucket_granularity():
    """The same speedup priced through `roofline_curve(..., "mtp")` as whatif does: 1.71x at 30
    (the 16-31 bucket's per-token cost, measured at 16 rows) and 1.34x at 128."""
    gemma = shape_from_config(GEMMA4_31B, "gemma-4-31B", "gemma-4-31B-it FP8")
    curve = roofline_curve(gemma, find_hardware("h100-nvl"), CONTEXT, "mtp",
                           draft=gemma4_assistant())
    for rows, expected in ((30, 1.710), (128, 1.339)):
        plain = curve.seconds(rows, 0, drafting_share=0.0)
        speedup = TOKENS_PER_STEP * plain / curve.seconds(rows, rows * K)
        assert speedup == pytest.approx(expected, abs=0.005)


def test_the_gpu_rows_model_error_note_quotes_this_check():
    """`core/curve_error.GPU_CHECK`, printed as the GPU prior's (unknown) model error, quotes
    the two figures above as computed here."""
    from vllm_specdec_plugin.core.curve_error import GPU_CHECK

    misses = [f"{rfc_speedup(rows) / rfc - 1:+.1%}" for rows, rfc in ((30, 1.79), (128, 1.00))]
    assert misses == ["-2.4%", "+33.8%"]
    assert (f"{misses[0]} at batch 30, +{round(100 * (rfc_speedup(128) - 1))}% at batch 128"
            in GPU_CHECK)



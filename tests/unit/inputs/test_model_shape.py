"""A checkpoint's config.json -> ModelShape (`inputs/model_shape.py`): published configs (their
config.json values, as small dicts) give the published parameter counts; nesting, quantization,
MoE and Gemma's layer kinds are read; a missing or wrong key is one line naming the file, the key
and the fix."""

from __future__ import annotations

import json

import pytest

from vllm_specdec_plugin.core.errors import SpecDecodeConfigError
from vllm_specdec_plugin.inputs.model_shape import read_model_shape, shape_from_config

LLAMA_31_8B = {"architectures": ["LlamaForCausalLM"], "model_type": "llama",
               "hidden_size": 4096, "intermediate_size": 14336, "num_attention_heads": 32,
               "num_hidden_layers": 32, "num_key_value_heads": 8, "vocab_size": 128256,
               "max_position_embeddings": 131072, "tie_word_embeddings": False,
               "torch_dtype": "bfloat16", "attention_bias": False}
SMOLLM2_135M = {"architectures": ["LlamaForCausalLM"], "model_type": "llama",
                "hidden_size": 576, "intermediate_size": 1536, "num_attention_heads": 9,
                "num_hidden_layers": 30, "num_key_value_heads": 3, "head_dim": 64,
                "vocab_size": 49152, "max_position_embeddings": 8192,
                "tie_word_embeddings": True, "dtype": "bfloat16"}
QWEN25_7B = {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2",
             "hidden_size": 3584, "intermediate_size": 18944, "num_attention_heads": 28,
             "num_hidden_layers": 28, "num_key_value_heads": 4, "vocab_size": 152064,
             "max_position_embeddings": 131072, "sliding_window": 131072,
             "use_sliding_window": False, "tie_word_embeddings": False,
             "torch_dtype": "bfloat16"}
MIXTRAL_8X7B = {"architectures": ["MixtralForCausalLM"], "model_type": "mixtral",
                "hidden_size": 4096, "intermediate_size": 14336, "num_attention_heads": 32,
                "num_hidden_layers": 32, "num_key_value_heads": 8, "vocab_size": 32000,
                "num_local_experts": 8, "num_experts_per_tok": 2,
                "max_position_embeddings": 32768, "tie_word_embeddings": False,
                "torch_dtype": "bfloat16"}
GEMMA3_27B = {"architectures": ["Gemma3ForConditionalGeneration"], "model_type": "gemma3",
              "text_config": {"model_type": "gemma3_text", "hidden_size": 5376,
                              "intermediate_size": 21504, "num_attention_heads": 32,
                              "num_hidden_layers": 62, "num_key_value_heads": 16,
                              "head_dim": 128, "sliding_window": 1024,
                              "sliding_window_pattern": 6, "vocab_size": 262208,
                              "max_position_embeddings": 131072}}
FP8_DYNAMIC = {"quant_method": "compressed-tensors", "ignore": ["lm_head"],
               "config_groups": {"group_0": {
                   "weights": {"num_bits": 8, "type": "float", "strategy": "channel"},
                   "input_activations": {"num_bits": 8, "type": "float", "dynamic": True}}},
               "kv_cache_scheme": {"num_bits": 8, "type": "float"}}


@pytest.mark.parametrize("config, total, active", [
    (LLAMA_31_8B, 8_030_261_248, 8_030_261_248),      # 8.03B
    (SMOLLM2_135M, 134_515_008, 134_515_008),         # 134.5M
    (QWEN25_7B, 7_615_616_512, 7_615_616_512),        # 7.61B (qkv biases included)
    (MIXTRAL_8X7B, 46_702_792_704, 12_879_925_248),   # 46.7B total, 12.9B active
])
def test_published_configs_give_published_parameter_counts(config, total, active):
    shape = shape_from_config(config, "config.json")
    assert (shape.parameters, shape.active_parameters) == (total, active)


def test_sizes_cache_and_dtype_are_read():
    llama = shape_from_config(LLAMA_31_8B, "config.json", "Llama-3.1-8B")
    assert (llama.layers, llama.kv_heads, llama.head_dim, llama.max_context) == (32, 8, 128,
                                                                                 131072)
    assert llama.kv_bytes_per_token == 131072 and llama.weight_bytes_per_param == 2.0
    assert not llama.tied_embeddings and llama.name == "Llama-3.1-8B"
    assert shape_from_config(SMOLLM2_135M, "c").tied_embeddings
    mixtral = shape_from_config(MIXTRAL_8X7B, "c")
    assert (mixtral.experts, mixtral.experts_per_token) == (8, 2)
    assert mixtral.expert_parameters == 32 * 8 * 3 * 4096 * 14336
    mtp = shape_from_config({**LLAMA_31_8B, "num_nextn_predict_layers": 1}, "c")
    assert mtp.mtp_layers == 1


def test_text_config_nesting_and_gemma_sliding_layers():
    gemma = shape_from_config(GEMMA3_27B, "config.json")
    assert gemma.layers == 62 and gemma.sliding_layers == 62 - 62 // 6
    # Gemma 3 27B: 27.4B with its 0.4B vision tower, so 27.0B of language model; ties by default
    assert gemma.tied_embeddings and gemma.sliding_window == 1024
    assert gemma.parameters == pytest.approx(27.0e9, rel=0.01)
    with_types = {"text_config": {**GEMMA3_27B["text_config"], "layer_types": (
        ["sliding_attention"] * 5 + ["full_attention"]) * 10 + ["sliding_attention"] * 2}}
    assert shape_from_config(with_types, "c").sliding_layers == 52


def test_quantization_sets_bytes_compute_and_cache():
    fp8 = shape_from_config({**LLAMA_31_8B, "quantization_config": FP8_DYNAMIC}, "c")
    assert fp8.weight_bytes_per_param == 1.0 and fp8.fp8_compute
    assert fp8.kv_bytes_per_element == 1.0
    assert fp8.unquantized_parameters == 2 * 128256 * 4096  # embedding and lm_head stay 16-bit
    awq = shape_from_config({**LLAMA_31_8B, "quantization_config": {
        "quant_method": "awq", "bits": 4, "group_size": 128}}, "c")
    assert awq.weight_bytes_per_param == 0.5 and not awq.fp8_compute
    native = shape_from_config({**LLAMA_31_8B, "quantization_config": {
        "quant_method": "fp8", "weight_block_size": [128, 128]}}, "c")
    assert native.weight_bytes_per_param == 1.0 and native.fp8_compute
    int8 = dict(FP8_DYNAMIC, config_groups={"g": {"weights": {"num_bits": 8, "type": "int"}}})
    w8a16 = shape_from_config({**LLAMA_31_8B, "quantization_config": int8}, "c")
    assert w8a16.weight_bytes_per_param == 1.0 and not w8a16.fp8_compute


@pytest.mark.parametrize("config, message", [
    ({k: v for k, v in LLAMA_31_8B.items() if k != "hidden_size"},
     r"^vllm-specdec-plugin: m/config\.json: hidden_size is missing \(the roofline prior needs "
     r"it\); fix the checkpoint's config\.json, or give --costs FILE"),
    ({**LLAMA_31_8B, "num_hidden_layers": "32"},
     r"m/config\.json: num_hidden_layers must be a positive integer, got str '32'"),
    ({**LLAMA_31_8B, "num_attention_heads": True},
     r"num_attention_heads must be a positive integer, got bool"),
    ({"text_config": {k: v for k, v in GEMMA3_27B["text_config"].items()
                      if k != "vocab_size"}},
     r"m/config\.json: text_config\.vocab_size is missing"),
    ({"text_config": {k: v for k, v in GEMMA3_27B["text_config"].items()
                      if k != "sliding_window"}},
     r"text_config\.sliding_window is missing while layers slide"),
    ({**LLAMA_31_8B, "quantization_config": {"quant_method": "exotic"}},
     r"quantization_config\.quant_method 'exotic' is not one the roofline prior knows"),
    ({**LLAMA_31_8B, "quantization_config": [1]}, r"quantization_config must be a mapping"),
])
def test_bad_configs_are_refused_in_one_line(config, message):
    with pytest.raises(SpecDecodeConfigError, match=message) as refused:
        shape_from_config(config, "m/config.json")
    assert "\n" not in str(refused.value)


def test_read_model_shape_from_a_checkpoint_directory(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(SMOLLM2_135M))
    shape = read_model_shape(str(tmp_path))
    assert shape.parameters == 134_515_008 and shape.name == tmp_path.name
    (tmp_path / "config.json").write_text('{"hidden_size": 576,')
    with pytest.raises(SpecDecodeConfigError, match=r"config\.json is not valid JSON"):
        read_model_shape(str(tmp_path))
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(SpecDecodeConfigError,
                       match=r"--model '.*' (\(\d+ chars\) )?is not a checkpoint directory "
                             r"with a config\.json; give a local checkpoint directory"):
        read_model_shape(str(empty))

"""A local checkpoint's config.json -> `core.roofline.ModelShape`, for the roofline prior.

The config is read by `inputs/checkpoint.read_config` (bounded size, strict UTF-8, the bounded
JSON parser). A multimodal checkpoint's language model is its `text_config` (Gemma 3/4, Llama 4,
Mistral 3), `llm_config` (InternVL) or `language_config`; keys are looked up there first, then at
the top. Sizes, MoE routing, Gemma's sliding-window and full-attention layers, the weights'
bytes (`dtype`/`torch_dtype` and `quantization_config`) and the cache's bytes
(`kv_cache_scheme`) come from the config; the parameter count is computed from the sizes
(`core.roofline.count_parameters`). A key the prior needs that is missing or not a count is
refused in one line naming the file, the key and the fix.

Not modelled (the count is then approximate): MLA attention (DeepSeek's `kv_lora_rank`), Gemma
3n/4's per-layer embeddings (`hidden_size_per_layer_input`) and KV-shared layers.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import PurePath
from typing import Any

from vllm_specdec_plugin.core.errors import SpecDecodeConfigError, quote_value
from vllm_specdec_plugin.core.roofline import ModelShape, count_parameters
from vllm_specdec_plugin.inputs.checkpoint import MTP_LAYER_KEYS, read_config

NESTED = ("text_config", "llm_config", "language_config")
FIX = "fix the checkpoint's config.json, or give --costs FILE measured by a running engine"
EXPERT_KEYS = ("num_local_experts", "num_experts", "n_routed_experts")
TOP_K_KEYS = ("num_experts_per_tok", "top_k_experts", "moe_topk")
# quant_method -> bytes per quantized weight, where the method fixes it
QUANT_BYTES = {"fp8": 1.0, "fbgemm_fp8": 1.0, "mxfp4": 0.5, "bitnet": 0.25}
QKV_BIAS_TYPES = ("qwen2", "qwen2_moe")
"""Qwen2's q/k/v projections have biases its config.json does not declare."""
BITS_METHODS = ("awq", "gptq", "awq_marlin", "gptq_marlin", "auto-round", "marlin")


class _Config:
    """The language model's keys first, then the top-level ones; refusals name the file."""

    def __init__(self, config: Mapping[str, Any], where: str) -> None:
        self.top, self.where = config, where
        self.inner: Mapping[str, Any] = {}
        self.prefix = ""
        for key in NESTED:
            nested = config.get(key)
            if isinstance(nested, dict):
                self.inner, self.prefix = nested, f"{key}."
                break

    def get(self, key: str) -> Any:
        value = self.inner.get(key)
        return self.top.get(key) if value is None else value

    def refuse(self, key: str, problem: str) -> SpecDecodeConfigError:
        return SpecDecodeConfigError(f"{self.where}: {self.prefix}{key} {problem}; {FIX}")

    def count(self, key: str, default: int | None = None, positive: bool = True) -> int:
        value = self.get(key)
        if value is None:
            if default is None:
                raise self.refuse(key, "is missing (the roofline prior needs it)")
            return default
        if isinstance(value, bool) or not isinstance(value, int) or value < int(positive):
            kind = "a positive" if positive else "a non-negative"
            raise self.refuse(key, f"must be {kind} integer, got {type(value).__name__} "
                                   f"{quote_value(value)}")
        return value

    def first_count(self, keys: tuple[str, ...]) -> int:
        for key in keys:
            if self.get(key) is not None:
                return self.count(key, positive=False)
        return 0


def _weight_bytes(cfg: _Config) -> tuple[float, bool, float | None]:
    """(bytes per quantized weight, FP8 matmuls, cache bytes per element or None)."""
    quant = cfg.get("quantization_config")
    if quant is None:
        return 2.0, False, None  # vLLM runs fp32/fp16/bf16 checkpoints in 16 bits
    if not isinstance(quant, dict):
        raise cfg.refuse("quantization_config", "must be a mapping")
    method = str(quant.get("quant_method", "")).lower()
    if method in QUANT_BYTES:
        return QUANT_BYTES[method], method in ("fp8", "fbgemm_fp8"), None
    if method in BITS_METHODS:
        bits = quant.get("bits", quant.get("w_bit", 4))
        return (bits / 8 if isinstance(bits, int) and 1 <= bits <= 16 else 0.5), False, None
    if method == "bitsandbytes":
        return (1.0 if quant.get("load_in_8bit") else 0.5), False, None
    if method == "modelopt":
        algo = str(quant.get("quant_algo", "")).upper()
        return (1.0, True, None) if "FP8" in algo else (0.5, False, None)
    if method == "compressed-tensors":
        return _compressed_tensors(quant)
    raise cfg.refuse("quantization_config.quant_method",
                     f"{quote_value(method)} is not one the roofline prior knows (fp8, "
                     "compressed-tensors, awq, gptq, bitsandbytes, modelopt, mxfp4)")


def _compressed_tensors(quant: dict[str, Any]) -> tuple[float, bool, float | None]:
    groups = quant.get("config_groups")
    group: Any = next(iter(groups.values()), {}) if isinstance(groups, dict) and groups else {}
    weights = group.get("weights") if isinstance(group, dict) else None
    acts = group.get("input_activations") if isinstance(group, dict) else None
    bits = weights.get("num_bits") if isinstance(weights, dict) else None
    per = bits / 8 if isinstance(bits, int) and 1 <= bits <= 16 else 1.0
    fp8 = (per == 1.0 and isinstance(weights, dict) and weights.get("type") == "float"
           and isinstance(acts, dict) and acts.get("num_bits") == 8)
    kv = quant.get("kv_cache_scheme")
    kv_bits = kv.get("num_bits") if isinstance(kv, dict) else None
    return per, fp8, (kv_bits / 8 if isinstance(kv_bits, int) and 1 <= kv_bits <= 16 else None)


def _sliding_layers(cfg: _Config, layers: int) -> int:
    kinds = cfg.get("layer_types")
    if isinstance(kinds, list):
        return sum(1 for kind in kinds if kind == "sliding_attention")
    pattern = cfg.get("sliding_window_pattern")
    if isinstance(pattern, int) and not isinstance(pattern, bool) and pattern > 1:
        return layers - layers // pattern  # Gemma 3: every pattern-th layer is global
    return 0


def shape_from_config(config: Mapping[str, Any], where: str, name: str = "model") -> ModelShape:
    """The shape of the checkpoint whose config.json (at `where`) is `config`."""
    cfg = _Config(config, where)
    layers, hidden = cfg.count("num_hidden_layers"), cfg.count("hidden_size")
    heads, vocab = cfg.count("num_attention_heads"), cfg.count("vocab_size")
    kv_heads = cfg.count("num_key_value_heads", heads)
    head_dim = cfg.count("head_dim", hidden // heads)
    experts = cfg.first_count(EXPERT_KEYS)
    expert_inter = cfg.count("moe_intermediate_size", 0, positive=False)
    intermediate = cfg.count("intermediate_size", expert_inter or None)
    sliding = _sliding_layers(cfg, layers) if layers else 0
    window = cfg.count("sliding_window", 0, positive=False) if sliding else 0
    if sliding and not window:
        raise cfg.refuse("sliding_window", "is missing while layers slide (layer_types)")
    global_kv = cfg.count("num_global_key_value_heads", 0, positive=False)
    global_dim = cfg.count("global_head_dim", 0, positive=False)
    shared = cfg.count("shared_expert_intermediate_size", 0, positive=False) or (
        cfg.count("n_shared_experts", 0, positive=False) * expert_inter)
    if cfg.get("enable_moe_block"):  # Gemma 4 MoE: a dense MLP beside the experts
        shared += intermediate
    tied_key = cfg.get("tie_word_embeddings")
    # absent: transformers' default for the family (Gemma ties, Llama/Qwen/Mistral do not)
    tied = tied_key is True or (tied_key is None
                                and str(cfg.get("model_type") or "").startswith("gemma"))
    total, active, routed = count_parameters(
        layers=layers, hidden=hidden, heads=heads, kv_heads=kv_heads, head_dim=head_dim,
        intermediate=intermediate, vocab=vocab, tied=tied, experts=experts,
        experts_per_token=cfg.first_count(TOP_K_KEYS) if experts else 0,
        expert_intermediate=expert_inter, shared_intermediate=shared,
        dense_layers=cfg.count("first_k_dense_replace", 0, positive=False) if experts else 0,
        global_layers=layers - sliding if (global_kv or global_dim) else 0,
        global_kv_heads=global_kv, global_head_dim=global_dim,
        k_eq_v=cfg.get("attention_k_eq_v") is True,
        qkv_bias=cfg.get("attention_bias") is True or cfg.get("model_type") in QKV_BIAS_TYPES)
    per_weight, fp8, kv_bytes = _weight_bytes(cfg)
    return ModelShape(
        parameters=total, active_parameters=active, layers=layers, hidden=hidden, heads=heads,
        kv_heads=kv_heads, head_dim=head_dim, intermediate=intermediate, vocab=vocab,
        weight_bytes_per_param=per_weight, kv_bytes_per_element=kv_bytes or 2.0,
        mtp_layers=max(cfg.count(key, 0, positive=False) for key in MTP_LAYER_KEYS),
        max_context=cfg.count("max_position_embeddings", 0, positive=False),
        tied_embeddings=tied, expert_parameters=routed, experts=experts,
        experts_per_token=cfg.first_count(TOP_K_KEYS) if experts else 0,
        sliding_layers=sliding, sliding_window=window, global_kv_heads=global_kv,
        global_head_dim=global_dim,
        # quantized checkpoints keep the embedding and lm_head in 16 bits
        unquantized_parameters=vocab * hidden * (1 if tied else 2) if per_weight < 2 else 0,
        fp8_compute=fp8, name=name)


def read_model_shape(path: str, what: str = "--model") -> ModelShape:
    """The shape of the local checkpoint directory `path` (its config.json)."""
    config = read_config(path, what)
    if config is None:
        raise SpecDecodeConfigError(
            f"{what} {quote_value(path)} is not a checkpoint directory with a config.json; "
            "give a local checkpoint directory")
    return shape_from_config(config, f"{path}/config.json", PurePath(path).name or path)

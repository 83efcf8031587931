"""The tiny models' shape: sizes, seeded weights in Hugging Face naming, and config.json keys.

Sized for vLLM's CPU backend (its attention kernels need a head size of at least 32). The targets
are near-bigram: `TARGET_BLOCK_SCALE` scales down the attention and MLP output projections, so
the next token depends mostly on the current one (see `checkpoints.py`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file

from .tiny_tokenizer import BOS_TOKEN, EOS_TOKEN, StrPath

HIDDEN_SIZE = 128
NUM_LAYERS = 2
NUM_HEADS = 4
NUM_KV_HEADS = 2
HEAD_DIM = 32  # vLLM's CPU attention supports head sizes >= 32 only.
INTERMEDIATE_SIZE = 256
MAX_POSITIONS = 2048
RMS_EPS = 1e-6
ROPE_THETA = 10000.0
DTYPE = "bfloat16"  # what vLLM picks on CPU for a float32 checkpoint anyway

# Scale of the attention / MLP output projections in the targets. Small values
# keep the residual stream dominated by the current token's embedding.
TARGET_BLOCK_SCALE = 0.3
# Scale of the logits (standard deviation) of the targets' LM heads.
_LOGIT_SCALE = 4.0

_TORCH_DTYPE = getattr(torch, DTYPE)

Tensors = dict[str, torch.Tensor]


class SeededInit:
    """Seeded random initializer (one generator per checkpoint)."""

    def __init__(self, seed: int) -> None:
        self.generator = torch.Generator().manual_seed(seed)

    def normal(self, *shape: int, std: float) -> torch.Tensor:
        return torch.randn(*shape, generator=self.generator) * std

    def linear(self, out_features: int, in_features: int, scale: float = 1.0) -> torch.Tensor:
        return self.normal(out_features, in_features, std=scale / in_features**0.5)


def ones(size: int) -> torch.Tensor:
    return torch.ones(size)


def decoder_layer(
    init: SeededInit,
    prefix: str,
    *,
    attn_input_size: int = HIDDEN_SIZE,
    out_scale: float = 1.0,
    qkv_bias: bool = False,
    input_layernorm: bool = True,
) -> Tensors:
    """Weights of one Llama/Qwen2 decoder layer in Hugging Face naming."""
    q_size, kv_size = NUM_HEADS * HEAD_DIM, NUM_KV_HEADS * HEAD_DIM
    tensors: Tensors = {
        f"{prefix}self_attn.q_proj.weight": init.linear(q_size, attn_input_size),
        f"{prefix}self_attn.k_proj.weight": init.linear(kv_size, attn_input_size),
        f"{prefix}self_attn.v_proj.weight": init.linear(kv_size, attn_input_size),
        f"{prefix}self_attn.o_proj.weight": init.linear(HIDDEN_SIZE, q_size, out_scale),
        f"{prefix}mlp.gate_proj.weight": init.linear(INTERMEDIATE_SIZE, HIDDEN_SIZE),
        f"{prefix}mlp.up_proj.weight": init.linear(INTERMEDIATE_SIZE, HIDDEN_SIZE),
        f"{prefix}mlp.down_proj.weight": init.linear(HIDDEN_SIZE, INTERMEDIATE_SIZE, out_scale),
        f"{prefix}post_attention_layernorm.weight": ones(HIDDEN_SIZE),
    }
    if input_layernorm:
        tensors[f"{prefix}input_layernorm.weight"] = ones(HIDDEN_SIZE)
    if qkv_bias:
        for name, size in (("q", q_size), ("k", kv_size), ("v", kv_size)):
            tensors[f"{prefix}self_attn.{name}_proj.bias"] = init.normal(size, std=0.02)
    return tensors


def lm_head_weight(init: SeededInit, vocab_size: int, pinned: Iterable[int] = ()) -> torch.Tensor:
    """An LM head whose rows for ``pinned`` token ids are zero (logit 0)."""
    weight = init.normal(vocab_size, HIDDEN_SIZE, std=_LOGIT_SCALE / HIDDEN_SIZE**0.5)
    for token_id in pinned:
        weight[token_id] = 0.0
    return weight


def decoder_lm(
    init: SeededInit, vocab_size: int, special: Iterable[int], qkv_bias: bool
) -> Tensors:
    """Embeddings, decoder stack, final norm and LM head of a target model."""
    tensors: Tensors = {"model.embed_tokens.weight": init.normal(vocab_size, HIDDEN_SIZE, std=1.0)}
    for layer in range(NUM_LAYERS):
        tensors.update(
            decoder_layer(
                init,
                f"model.layers.{layer}.",
                out_scale=TARGET_BLOCK_SCALE,
                qkv_bias=qkv_bias,
            )
        )
    tensors["model.norm.weight"] = ones(HIDDEN_SIZE)
    tensors["lm_head.weight"] = lm_head_weight(init, vocab_size, special)
    return tensors


def save_weights(out_dir: Path, tensors: Tensors) -> None:
    contiguous = {
        name: tensor.to(_TORCH_DTYPE).contiguous() for name, tensor in sorted(tensors.items())
    }
    save_file(contiguous, str(out_dir / "model.safetensors"), metadata={"format": "pt"})


def read_config(model_dir: StrPath) -> dict[str, Any]:
    config: dict[str, Any] = json.loads((Path(model_dir) / "config.json").read_text())
    return config


def base_config(vocab_size: int, ids: dict[str, int]) -> dict[str, Any]:
    """Config keys shared by the Llama and Qwen2 (MiMo) targets and drafts."""
    return {
        "vocab_size": vocab_size,
        "hidden_size": HIDDEN_SIZE,
        "intermediate_size": INTERMEDIATE_SIZE,
        "num_hidden_layers": NUM_LAYERS,
        "num_attention_heads": NUM_HEADS,
        "num_key_value_heads": NUM_KV_HEADS,
        "hidden_act": "silu",
        "max_position_embeddings": MAX_POSITIONS,
        "rms_norm_eps": RMS_EPS,
        "rope_theta": ROPE_THETA,
        "rope_parameters": {"rope_type": "default", "rope_theta": ROPE_THETA},
        "tie_word_embeddings": False,
        "bos_token_id": ids[BOS_TOKEN],
        "eos_token_id": ids[EOS_TOKEN],
        "pad_token_id": ids[BOS_TOKEN],
        "dtype": DTYPE,
        "torch_dtype": DTYPE,
        "use_cache": True,
    }


def llama_config(vocab_size: int, ids: dict[str, int]) -> dict[str, Any]:
    return {
        **base_config(vocab_size, ids),
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "head_dim": HEAD_DIM,
        "attention_bias": False,
        "mlp_bias": False,
    }

"""Tiny draft checkpoints for a tiny Llama target: EAGLE-1, EAGLE-3 and Medusa.

The EAGLE draft is *aligned* (its ``fc`` routes the token embedding through, so it predicts the
target's bigram map and some drafts are accepted); the EAGLE-3 and Medusa drafts are plain random
and rarely get a draft accepted.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from .tiny_model import (
    DTYPE,
    HIDDEN_SIZE,
    SeededInit,
    Tensors,
    decoder_layer,
    lm_head_weight,
    ones,
    read_config,
    save_weights,
)
from .tiny_tokenizer import StrPath, write_json


def _draft_config(target_dir: StrPath, architecture: str) -> dict[str, Any]:
    target = read_config(target_dir)
    config = {
        key: target[key]
        for key in (
            "vocab_size",
            "hidden_size",
            "intermediate_size",
            "num_attention_heads",
            "num_key_value_heads",
            "head_dim",
            "hidden_act",
            "max_position_embeddings",
            "rms_norm_eps",
            "rope_theta",
            "rope_parameters",
            "bos_token_id",
            "eos_token_id",
            "pad_token_id",
            "dtype",
            "torch_dtype",
        )
        if key in target
    }
    config.update(
        {
            "architectures": [architecture],
            "model_type": "llama",
            "num_hidden_layers": 1,
            "tie_word_embeddings": False,
            "attention_bias": False,
            "mlp_bias": False,
        }
    )
    return config


def _check_target(target_dir: StrPath) -> dict[str, Any]:
    target = read_config(target_dir)
    if target.get("hidden_size") != HIDDEN_SIZE:
        raise ValueError(f"{target_dir} is not a tiny target built by this module")
    return target


def build_eagle_draft(target_dir: StrPath, out_dir: StrPath, seed: int = 2) -> Path:
    """Build an EAGLE-1 draft (``EagleLlamaForCausalLM``) for a tiny Llama.

    One decoder layer without input norm plus ``fc`` (2*hidden -> hidden); the
    embeddings and LM head are shared with the target (not stored).  ``fc``
    passes the token embedding through, so the draft predicts the target's
    bigram map and some drafts are accepted.
    """
    _check_target(target_dir)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    init = SeededInit(seed)
    tensors = decoder_layer(init, "layers.0.", out_scale=0.05, input_layernorm=False)
    # fc sees cat([token_embedding, hidden_states]).
    fc = init.linear(HIDDEN_SIZE, 2 * HIDDEN_SIZE, scale=0.05)
    fc[:, :HIDDEN_SIZE] += torch.eye(HIDDEN_SIZE)
    tensors["fc.weight"] = fc
    write_json(out / "config.json", _draft_config(target_dir, "EagleLlamaForCausalLM"))
    save_weights(out, tensors)
    return out


def build_eagle3_draft(target_dir: StrPath, out_dir: StrPath, seed: int = 3) -> Path:
    """Build an EAGLE-3 draft (``Eagle3LlamaForCausalLM``) for a tiny Llama.

    Weights follow the original EAGLE-3 layout (``midlayer.*``, ``fc``,
    ``norm``, own ``lm_head``; embeddings shared with the target).  ``fc``
    fuses three target hidden states: after the embeddings and after each of
    the two layers (``eagle_aux_hidden_state_layer_ids`` = [0, 1, 2]).
    """
    target = _check_target(target_dir)
    vocab_size = int(target["vocab_size"])
    num_layers = int(target["num_hidden_layers"])
    aux_layer_ids = [0, num_layers // 2, num_layers]
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    init = SeededInit(seed)
    tensors = decoder_layer(init, "midlayer.", attn_input_size=2 * HIDDEN_SIZE)
    tensors["midlayer.hidden_norm.weight"] = ones(HIDDEN_SIZE)
    tensors["fc.weight"] = init.linear(HIDDEN_SIZE, len(aux_layer_ids) * HIDDEN_SIZE)
    tensors["norm.weight"] = ones(HIDDEN_SIZE)
    tensors["lm_head.weight"] = lm_head_weight(init, vocab_size)
    config = _draft_config(target_dir, "Eagle3LlamaForCausalLM")
    config.update(
        {
            "draft_vocab_size": vocab_size,
            "target_hidden_size": HIDDEN_SIZE,
            "eagle_aux_hidden_state_layer_ids": aux_layer_ids,
            "eagle_config": {
                "eagle_aux_hidden_state_layer_ids": aux_layer_ids,
                "use_aux_hidden_state": True,
            },
        }
    )
    write_json(out / "config.json", config)
    save_weights(out, tensors)
    return out


def build_medusa_draft(
    target_dir: StrPath, out_dir: StrPath, num_heads: int = 3, seed: int = 4
) -> Path:
    """Build a Medusa draft (``MedusaModel``) with ``num_heads`` heads.

    Each head is one residual block (``blocks.{h}.layers.0``) and its own LM
    head (``lm_heads.{h}``), the layout vLLM's ``Medusa`` module loads.
    ``num_speculative_tokens`` must not exceed ``num_heads``.
    """
    target = _check_target(target_dir)
    vocab_size = int(target["vocab_size"])
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    init = SeededInit(seed)
    tensors: Tensors = {}
    for head in range(num_heads):
        tensors[f"blocks.{head}.layers.0.weight"] = init.linear(HIDDEN_SIZE, HIDDEN_SIZE)
        tensors[f"lm_heads.{head}.weight"] = lm_head_weight(init, vocab_size)
    config = {
        "architectures": ["MedusaModel"],
        "model_type": "medusa",
        "hidden_size": HIDDEN_SIZE,
        "vocab_size": vocab_size,
        "truncated_vocab_size": vocab_size,
        "num_heads": num_heads,
        "num_hidden_layers": 1,
        "max_paths": 64,
        "topk": 10,
        "dtype": target.get("dtype", DTYPE),
        "torch_dtype": target.get("dtype", DTYPE),
    }
    write_json(out / "config.json", config)
    save_weights(out, tensors)
    return out

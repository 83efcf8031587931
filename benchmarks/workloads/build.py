"""Build the benchmark workloads as JSON data, deterministically (fixed seed, no clock).

`python -m benchmarks workloads` (or `python -m benchmarks.workloads.build`) rewrites
`benchmarks/workloads/*.json`; running it twice gives byte-identical files. Every prompt is a
chat (a list of messages); the harness renders it with the model's chat template. Three workloads:

- input_grounded: code edits, rewrites and summaries of text given in the prompt (the answer
  copies from the prompt: n-gram and suffix drafts should be accepted often);
- multi_turn: agent loops that re-send earlier turns and ask the model to re-emit earlier text;
- open_ended: stories and explanations (little to copy: speculation mostly costs).
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from benchmarks.workloads.corpus import (
    AUDIENCES,
    CHARACTERS,
    CODE_SNIPPETS,
    CONCEPTS,
    GOALS,
    PARAGRAPHS,
    PLANS,
)

HERE = Path(__file__).parent
SEED = 20240601
PROMPTS_PER_WORKLOAD = 64
Message = dict[str, str]
Chat = list[Message]

AGENT_SYSTEM = (
    "You are a coding agent. To change a file, answer with the complete new file inside one "
    "```python block, and nothing else."
)
PLANNER_SYSTEM = "You are a planning agent. Always answer with the complete, numbered plan."


def user(text: str) -> Message:
    return {"role": "user", "content": text}


def assistant(text: str) -> Message:
    return {"role": "assistant", "content": text}


def typos(text: str, rng: random.Random, rate: float = 0.08) -> str:
    """Swap two inner letters in about `rate` of the words (a seeded, reproducible misspelling)."""
    words = text.split(" ")
    for i, word in enumerate(words):
        if len(word) > 4 and word.isalpha() and rng.random() < rate:
            j = rng.randrange(1, len(word) - 2)
            words[i] = word[:j] + word[j + 1] + word[j] + word[j + 2:]
    return " ".join(words)


def code_edits() -> Iterator[Chat]:
    """Code edits: the answer is the given code with a small change."""
    asks = (
        "Rename the function `{name}` to `{name}_v2` everywhere. Return the complete updated "
        "code.",
        "Add a one-line docstring to every function. Return the complete updated code.",
        "Add Python type hints to every function signature. Return the complete updated code.",
    )
    for (name, code), ask in ((s, a) for a in asks for s in CODE_SNIPPETS):
        yield [user(f"{ask.format(name=name)}\n\n```python\n{code}```")]


def rewrites(rng: random.Random) -> Iterator[Chat]:
    """Rewrites: fix typos, or change the tense; the answer is the text, lightly edited."""
    for topic, text in PARAGRAPHS:
        yield [user("Correct the spelling mistakes in this text. Change nothing else and return "
                    f"the full corrected text.\n\n{typos(text, rng)}")]
        yield [user(f"Rewrite this text about {topic} in the past tense, keeping every sentence."
                    f"\n\n{text}")]


def summaries() -> Iterator[Chat]:
    """Summaries and extractions that quote the given text."""
    asks = (
        "Summarise the following text in three bullet points, reusing its own words.",
        "Write a one-paragraph summary of the following text.",
        "List the key facts in the following text, one per line, quoting the text.",
    )
    for ask in asks:
        for _topic, text in PARAGRAPHS:
            yield [user(f"{ask}\n\n{text}")]


def input_grounded(rng: random.Random) -> list[Chat]:
    """Code edit, rewrite and summarise prompts, shuffled so every slice mixes the three."""
    chats = [*code_edits(), *rewrites(rng), *summaries()]
    rng.shuffle(chats)
    return chats


def fix_loop(name: str, code: str, turns: int, rng: random.Random) -> Chat:
    """An agent that wrote a file and is told, turn after turn, to send it again."""
    errors = ("lint: line too long", "test failed: AssertionError", "flake8: E302 expected 2 "
              "blank lines", "mypy: missing return type", "CI timed out")
    chat: Chat = [{"role": "system", "content": AGENT_SYSTEM},
                  user(f"Create `{name}.py` with this content:\n\n```python\n{code}```")]
    for turn in range(turns):
        chat.append(assistant(f"```python\n{code}```"))
        error = rng.choice(errors)
        chat.append(user(f"Tool result (attempt {turn + 1}): {error} in `{name}.py`. Send the "
                         "complete file again, unchanged except where the error requires."))
    return chat


def plan_loop(goal: str, steps: list[str], turns: int) -> Chat:
    """A planner that re-emits its whole plan after each completed step."""
    plan = "\n".join(f"{i + 1}. [ ] {step}" for i, step in enumerate(steps))
    chat: Chat = [{"role": "system", "content": PLANNER_SYSTEM},
                  user(f"Goal: {goal}. Write the plan.")]
    for turn in range(turns):
        chat.append(assistant(plan))
        plan = plan.replace(f"{turn + 1}. [ ]", f"{turn + 1}. [x]")
        chat.append(user(f"Step {turn + 1} is done. Print the complete updated plan, marking "
                         f"step {turn + 1} with [x]."))
    return chat


def multi_turn(rng: random.Random) -> list[Chat]:
    """Agent loops: half file-fix loops, half planning loops, 1 to 3 earlier turns each."""
    chats: list[Chat] = []
    for i in range(PROMPTS_PER_WORKLOAD):
        turns = 1 + i % 3
        if i % 2 == 0:
            name, code = CODE_SNIPPETS[(i // 2) % len(CODE_SNIPPETS)]
            chats.append(fix_loop(name, code, turns, rng))
        else:
            goal, steps = PLANS[(i // 2) % len(PLANS)]
            chats.append(plan_loop(goal, steps, turns))
    return chats


def open_ended(rng: random.Random) -> list[Chat]:
    """Stories and explanations: nothing in the prompt to copy."""
    stories = [[user(f"Write a short story about {who} who {goal}.")]
               for who in CHARACTERS for goal in GOALS]
    explanations = [[user(f"Explain {concept} to {audience}.")]
                    for concept in CONCEPTS for audience in AUDIENCES]
    rng.shuffle(stories)
    rng.shuffle(explanations)
    half = PROMPTS_PER_WORKLOAD // 2
    return [chat for pair in zip(stories[:half], explanations[:half], strict=True) for chat in pair]


WORKLOADS: dict[str, tuple[str, Callable[[random.Random], list[Chat]]]] = {
    "input_grounded": ("code edit, rewrite, summarise: the answer copies from the prompt",
                       input_grounded),
    "multi_turn": ("agent loops that re-send and re-emit earlier text (chat template)",
                   multi_turn),
    "open_ended": ("stories and explanations: little to copy", open_ended),
}


def build(name: str) -> dict[str, Any]:
    """One workload as a JSON-ready dict (its own seeded RNG, so workloads are independent)."""
    description, make = WORKLOADS[name]
    chats = make(random.Random(f"{SEED}-{name}"))[:PROMPTS_PER_WORKLOAD]
    if len(chats) < PROMPTS_PER_WORKLOAD:
        raise ValueError(f"{name}: only {len(chats)} prompts")
    return {"name": name, "description": description, "seed": SEED,
            "prompts": [{"id": f"{name}-{i:03d}", "messages": chat}
                        for i, chat in enumerate(chats)]}


def main(argv: Sequence[str] | None = None) -> int:
    """Write every workload to `benchmarks/workloads/<name>.json`."""
    import argparse

    argparse.ArgumentParser(description=main.__doc__).parse_args(argv)
    for name in WORKLOADS:
        path = HERE / f"{name}.json"
        path.write_text(json.dumps(build(name), indent=1, ensure_ascii=False) + "\n")
        print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

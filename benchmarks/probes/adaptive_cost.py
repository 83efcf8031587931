"""The adaptive proposer's own cost per step, in microseconds per batch row.

    python -m benchmarks adaptive_cost [--rows 1 4 16 32] [--steps 400]

Drives the real `AdaptiveProposer` (vLLM's numba n-gram matcher, arctic_inference's suffix
tree when installed) the way the model runner does: each row holds a request whose true
continuation is known; drafts are verified against it (accepted prefix + one bonus token), rows
whose request ends take a new one. The engine's own step is not run, so the time measured is
the proposer's alone; in its place the harness spins (busy, as a step keeps the core busy) for
`--step-ms` x (16 + rows + drafted tokens), a compute-bound step like the CPU engine's, so
drafting pays only where drafts are accepted and the proposer's cost table and controller see
a step to decide on (`--step-ms 0`: no step; the proposer then sees only its own time).
`--copy-share` sets the share of requests that copy from their prompt (drafts accepted; the
rest do not): by default half, then none (where the proposer should go dormant).
"""

from __future__ import annotations

import argparse
import json
import random
import time
from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any

import numpy as np

MAX_MODEL_LEN = 2048
PROMPT_TOKENS = 300
OUTPUT_TOKENS = 128
VOCAB = 32000


def fake_config(max_rows: int, k: int) -> Any:
    """The parts of a VllmConfig the proposer reads."""
    return SimpleNamespace(
        speculative_config=SimpleNamespace(num_speculative_tokens=k),
        model_config=SimpleNamespace(max_model_len=MAX_MODEL_LEN),
        scheduler_config=SimpleNamespace(max_num_seqs=max_rows))


def new_request(rng: random.Random, copy_share: float = 0.5) -> tuple[list[int], list[int]]:
    """(prompt, true continuation): copying requests continue a stretch of their prompt."""
    prompt = [rng.randrange(VOCAB) for _ in range(PROMPT_TOKENS)]
    if rng.random() < copy_share:
        start = rng.randrange(PROMPT_TOKENS - OUTPUT_TOKENS)
        return prompt, prompt[start:start + OUTPUT_TOKENS]
    return prompt, [rng.randrange(VOCAB) for _ in range(OUTPUT_TOKENS)]


def run(rows: int, steps: int, k: int = 16, seed: int = 0,
        copy_share: float = 0.5, step_ms: float = 0.0) -> dict[str, float]:
    """Drive one proposer for `steps` steps at batch `rows`; its overhead and counters."""
    from vllm_specdec_plugin.adaptive import AdaptiveProposer

    rng = random.Random(seed)
    proposer = AdaptiveProposer(fake_config(rows, k))
    token_ids = np.zeros((rows, MAX_MODEL_LEN), dtype=np.int32)
    num_tokens = np.zeros(rows, dtype=np.int32)
    truth: list[list[int]] = []
    emitted = [0] * rows
    for row in range(rows):
        truth.append(_load(row, rng, token_ids, num_tokens, copy_share))
    drafts: list[list[int]] = [[] for _ in range(rows)]
    sampled: list[list[int]] = [[] for _ in range(rows)]
    for row in range(rows):  # the prefill step's one sampled token
        sampled[row] = [truth[row][0]]
        _append(row, sampled[row], token_ids, num_tokens)
        emitted[row] = 1
    for _ in range(steps):
        drafts = proposer.propose(sampled, num_tokens, token_ids)
        if step_ms:
            _busy(step_ms / 1e3 * (16 + rows + sum(map(len, drafts))))
        for row in range(rows):
            if emitted[row] >= len(truth[row]):
                truth[row] = _load(row, rng, token_ids, num_tokens, copy_share)
                emitted[row] = 0
                drafts[row] = []
            true = truth[row][emitted[row]:]
            accepted = 0
            while (accepted < len(drafts[row]) and accepted < len(true) - 1
                   and drafts[row][accepted] == true[accepted]):
                accepted += 1
            sampled[row] = true[:accepted + 1]
            _append(row, sampled[row], token_ids, num_tokens)
            emitted[row] += len(sampled[row])
    from vllm_specdec_plugin.proposer.stats import per_row_us

    stats: dict[str, Any] = proposer.stats.as_dict()
    stats["us_per_row"] = per_row_us(stats)
    stats["us_per_row_awake"] = per_row_us(stats, "awake")
    stats["us_per_row_dormant"] = per_row_us(stats, "dormant")
    stats["us_per_step"] = 1e6 * stats["overhead_s"] / max(stats["calls"], 1)
    return stats


def _busy(seconds: float) -> None:
    """Spin for `seconds` (a step keeps the core busy; a sleep would let it idle)."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def _load(row: int, rng: random.Random, token_ids: np.ndarray, num_tokens: np.ndarray,
          copy_share: float) -> list[int]:
    prompt, continuation = new_request(rng, copy_share)
    token_ids[row, :len(prompt)] = prompt
    num_tokens[row] = len(prompt)
    return continuation


def _append(row: int, tokens: Sequence[int], token_ids: np.ndarray,
            num_tokens: np.ndarray) -> None:
    n = int(num_tokens[row])
    token_ids[row, n:n + len(tokens)] = tokens
    num_tokens[row] = n + len(tokens)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[1, 4, 16, 32])
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--copy-share", type=float, nargs="+", default=[0.5, 0.0],
                        help="shares of requests that copy from their prompt (0: open-ended "
                        "only, where the proposer should go dormant)")
    parser.add_argument("--step-ms", type=float, default=0.1,
                        help="simulated step: this many ms per (16 + rows + drafted tokens)")
    args = parser.parse_args(argv)
    results: dict[str, Any] = {}
    for share in args.copy_share:
        for rows in args.rows:
            start = time.perf_counter()
            stats = run(rows, args.steps, copy_share=share, step_ms=args.step_ms)
            results[f"copy {share:.0%}, rows {rows}"] = {
                **{key: None if stats[key] is None else round(stats[key], 1)
                   for key in ("us_per_row", "us_per_row_awake", "us_per_row_dormant",
                               "us_per_step")},
                "awake_rows": stats["awake_rows"], "dormant_rows": stats["dormant_rows"],
                "draft_tokens": stats["draft_tokens"],
                "accepted_tokens": stats["accepted_tokens"],
                "requests": stats["requests"],
                "wall_s": round(time.perf_counter() - start, 1)}
    print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

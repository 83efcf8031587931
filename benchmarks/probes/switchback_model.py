"""The in-engine switchback, simulated on replayed traffic: what it measures, not what a run gets.

`whatif` predicts a run's speedup: every step at k against every step at k=0. The switchback
(`core/switchback.py`) alternates the two arms in blocks of 6 settled steps inside one stream of
requests, so a request's text is shared between the arms. Where the text is heterogeneous (a
copying passage in an otherwise open answer), k=0 blocks crawl through a copying passage a token
a step while k=5 blocks cross it in a few steps: the stream spends more of its time in those
passages than a k=5 run does, and the k=5 blocks that land there count more. Its throughput
ratio then reads above the run's speedup (it can exceed the run's tokens per step).

This module plays the switchback's rules on the replayed requests: batches of `concurrency`
requests as `schedule_switchback.serve` sends them, one bucket state per batch size with pairs
of blocks in a random order (its seeded `random.Random(bucket)`, as the engine's), a step
settled when its k equals the previous step's, drafts only on a step that follows a step at the
same k > 0 (vLLM drafts after a step for the next one), vLLM's own n-gram matcher, and the step
costs from the same `StepCostCurve` `whatif` uses. The throughput ratio of the concurrency's
bucket is what the engine's switchback should read if the replay and the costs are right.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from vllm_specdec_plugin.core.step_cost import StepCostCurve, bucket

BLOCK_STEPS = 6
"""`ControllerParams.block_steps`: settled steps per block."""


@dataclass
class _Bucket:
    rng: random.Random
    order: list[int] = field(default_factory=list)
    steps: int = 0
    tokens: float = 0.0
    seconds: float = 0.0
    totals: list[list[float]] = field(default_factory=lambda: [[0.0, 0.0], [0.0, 0.0]])
    pair: list[tuple[int, float, float]] = field(default_factory=list)
    pairs: int = 0


def simulate(requests: Sequence[Any], k: int, lookup: tuple[int, int], curve: StepCostCurve,
             concurrency: int, pairs: int = 300, max_model_len: int = 2048) -> dict[str, Any]:
    """The switchback's k0-against-k`k` throughput ratio in the bucket of `concurrency`."""
    from vllm.v1.spec_decode.ngram_proposer import (
        _find_longest_matched_ngram_and_propose_tokens as match,
    )

    buckets: dict[int, _Bucket] = {}
    key_of_cell = bucket(concurrency)
    index, previous_k = 0, -1
    guard = 0
    while (buckets.get(key_of_cell) is None or buckets[key_of_cell].pairs < pairs) \
            and guard < 2_000_000:
        rows = []
        for _ in range(concurrency):
            r = requests[index % len(requests)]
            index += 1
            rows.append([np.concatenate([r.prompt_ids, r.completion_ids]).astype(np.int32),
                         len(r.prompt_ids), len(r.completion_ids), 1])  # the prefill: 1 out
        previous_k = -1  # a step with a prefill is not clean
        while any(g < n for _, _, n, g in rows) and guard < 2_000_000:
            guard += 1
            alive = [row for row in rows if row[3] < row[2]]
            key = bucket(len(alive))
            state = buckets.get(key)
            if state is None:
                state = buckets[key] = _Bucket(random.Random(key))
                state.order = state.rng.sample([0, 1], 2)
            arm = state.order[0]
            k_now = k if arm == 1 else 0
            drafts_ready = k_now > 0 and previous_k == k_now
            tokens = drafted = 0
            for row in alive:
                tokens_row, prompt_len, n, g = row
                accepted = 0
                if drafts_ready:
                    length = prompt_len + g
                    draft = match(tokens_row[:length], lookup[0], lookup[1], max_model_len, k)
                    drafted += len(draft)
                    while (accepted < len(draft) and g + accepted < n
                           and draft[accepted] == tokens_row[length + accepted]):
                        accepted += 1
                out = min(1 + accepted, n - g)
                row[3] = g + out
                tokens += out
            seconds = curve.seconds(len(alive), drafted, 1.0 if drafted else 0.0)
            settled = k_now == previous_k
            previous_k = k_now
            if not settled:
                continue
            state.steps += 1
            state.tokens += tokens
            state.seconds += seconds
            if state.steps < BLOCK_STEPS:
                continue
            state.pair.append((arm, state.tokens, state.seconds))
            state.order.pop(0)
            if not state.order:
                for got_arm, got_tokens, got_seconds in state.pair:
                    state.totals[got_arm][0] += got_tokens
                    state.totals[got_arm][1] += got_seconds
                state.pairs += 1
                state.pair = []
                state.order = state.rng.sample([0, 1], 2)
            state.steps, state.tokens, state.seconds = 0, 0.0, 0.0
    cell = buckets[key_of_cell]
    (t0, s0), (t1, s1) = cell.totals
    return {"pairs": cell.pairs, "throughput_ratio": (t1 / s1) / (t0 / s0)}


def lockstep(result: Any, curve: StepCostCurve, concurrency: int) -> float:
    """`run_pairs`' load at `concurrency` > 1: batches of `concurrency` requests in traffic
    order, each batch served whole (its requests start together; one that finishes early leaves
    the batch smaller until the slowest is done). From the replay's per-request counts (`whatif`'s
    `ReplayResult`): under k each row runs its own verify steps at its mean draft per step;
    without speculation every row runs n - 1 steps. Returns the decode-time ratio k0 / k."""
    none = spec = 0.0
    n = len(result.steps)
    for start in range(0, n - concurrency + 1, concurrency):
        rows = range(start, start + concurrency)
        plain = [int(result.output_tokens[i]) - 1 for i in rows]
        steps = [int(result.steps[i]) for i in rows]
        draft = [float(result.drafted[i]) / max(steps_i, 1)
                 for i, steps_i in zip(rows, steps, strict=True)]
        share = [float(result.drafting_steps[i]) / max(steps_i, 1)
                 for i, steps_i in zip(rows, steps, strict=True)]
        for j in range(max(plain)):
            alive = sum(p > j for p in plain)
            none += curve.seconds(alive, 0.0, 0.0)
        for j in range(max(steps)):
            alive = [r for r in range(concurrency) if steps[r] > j]
            quiet = 1.0
            for r in alive:
                quiet *= 1.0 - share[r]
            spec += curve.seconds(len(alive), sum(draft[r] for r in alive), 1.0 - quiet)
    return none / spec

"""A synthetic engine whose rows copy passages, as n-gram drafting sees input-grounded text.

Unlike `Traffic` (tests/unit/core/test_schedule_control_noise.py), whose rows accept drafts
afresh at every step, a row here has a state that outlives a block of steps: free text, or a
matched passage with tokens left. In free text a row emits one token a step and no draft
(the proposer finds no match); after a free token a passage starts with probability
1 / `free_mean`, its length drawn geometric with mean `passage_mean`. In a passage with r
tokens left, a step at k > 0 drafts k tokens and accepts min(k, r); the bonus token is the
passage's next one when r > k, else the first free token. At k = 0 a passage row emits one
token a step, as free text. So a k > 0 spends 1 / (1 + k) of a passage's tokens as steps, a
larger k leaves a passage in fewer steps, and a row's share of steps in a passage is k's own:
which k ran before a block decides how many rows are in a passage when it starts (the
carry-over a switchback of short blocks inherits), while the share of *tokens* emitted in a
passage is the text's, the same under every k. With `ngram_ends` a passage ends as it does
for vLLM's n-gram drafter: one more drafting step, rejected at once, where the passage's last
token came as a bonus (the context still matches the source).

As in vLLM, a step verifies the drafts proposed after the step before, at that step's k: a
step's k (the lookup's, `num_spec_tokens_to_schedule`) is what the proposer drafts after it. So
the first step at a new k drafts nothing new yet: its rows are what the k before left.

A step takes `base` (times 1 + `switch` when it verifies drafts) plus `per_token` per verified
token, times lognormal noise and a drifting host. `fixed_rate` is ground truth: a k held fixed
over many steps, noise-free.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from collections.abc import Callable, Iterator

from vllm_specdec_plugin.core.schedule_state import Step
from vllm_specdec_plugin.core.step_cost import bucket_bounds


def land_writes(writes: list[tuple[int, int, int]], lookup: list[int], t: int) -> None:
    """Each lookup write (the step it lands at, bucket, k) due by step `t` applied to vLLM's
    lookup (index = batch size), as the scheduler reads it."""
    while writes and writes[0][0] <= t:
        _, key, k = writes.pop(0)
        low, high = bucket_bounds(key)
        for b in range(low, min(high, len(lookup) - 1) + 1):
            lookup[b] = k


def steady_host(_t: int) -> float:
    return 1.0


class Passages:
    """A synthetic engine of rows that copy passages; see the module docstring."""

    def __init__(self, seed: int, prior: list[int], rows: int, free_mean: float,
                 passage_mean: float, base: float = 0.012, per_token: float = 0.0006,
                 switch: float = 0.0, noise: float = 0.05,
                 host: Callable[[int], float] = steady_host, lag: int = 1,
                 short_share: float = 0.0, short_mean: float = 2.0, counts: bool = False,
                 ngram_ends: bool = False) -> None:
        self.rng = random.Random(seed)
        self.counts = counts
        """Whether a step carries vLLM's accepted counts per position (`Step.drafts`,
        `Step.accepted`), as an engine with `log_stats` gives them."""
        self.last: tuple[int, list[int]] = (0, [])
        """The last `advance`'s drafting rows and accepted counts per position."""
        self.ngram_ends = ngram_ends
        """Whether a passage ends as it does for vLLM's n-gram drafter: where a step's bonus
        token was the passage's last, the context still matches the source, so the next
        step at k > 0 drafts the source's continuation and has it rejected at the first
        position (one token, a drafting row), as a larger k's draft was rejected there. A
        drafter of fewer tokens drafts a prefix of a longer one's (what `shorter_steps`
        counts on). Without it, the passage's end is known: that row is free text."""
        self.lookup = list(prior)
        self.left = [0] * rows
        """Per row, the passage tokens it has still to emit (0: free text)."""
        self.free_mean, self.passage_mean = free_mean, passage_mean
        self.short_share, self.short_mean = short_share, short_mean
        """A share of matches that run short (mean `short_mean` tokens): n-gram matches that
        diverge after a token or two, which a larger k drafts past and pays to verify."""
        self.base, self.per_token, self.switch, self.noise = base, per_token, switch, noise
        self.host, self.lag = host, lag
        self.writes: list[tuple[int, int, int]] = []
        self.steps_at: Counter[int] = Counter()
        self.t = 0
        self.proposed = -1
        """The k the proposer drafted at after the last step (-1: no step yet)."""

    def seconds(self, batch: int, drafted: int) -> float:
        """A step's mean seconds, without noise or drift."""
        return (self.base * (1.0 + (self.switch if drafted else 0.0))
                + self.per_token * (batch + drafted))

    def _passage(self) -> int:
        short = self.short_share and self.rng.random() < self.short_share
        mean = self.short_mean if short else self.passage_mean
        return 1 + int(self.rng.expovariate(1.0 / max(mean - 1.0, 1e-9)))

    def advance(self, batch: int, k: int) -> tuple[int, int]:
        """One step of the first `batch` rows at k: (tokens emitted, tokens drafted)."""
        tokens = drafted = drafts = 0
        per_position = [0] * k
        left, rng = self.left, self.rng
        for row in range(batch):
            r = left[row]
            if r > 0 and k > 0:
                drafted += k
                drafts += 1
                accepted = min(k, r)
                for j in range(accepted):
                    per_position[j] += 1
                tokens += 1 + accepted
                rest = r - accepted - 1 if r > k else 0
                # the passage's last token was the bonus: the n-gram still matches
                left[row] = -1 if self.ngram_ends and r > k and not rest else rest
            elif r > 0:
                tokens += 1
                left[row] = r - 1 if r > 1 or not self.ngram_ends else -1
            else:
                if r < 0 and k > 0:  # drafts the source's continuation, rejected at once
                    drafted += k
                    drafts += 1
                left[row] = 0
                tokens += 1
                if rng.random() < 1.0 / self.free_mean:
                    left[row] = self._passage()
        self.last = (drafts, per_position)
        return tokens, drafted

    def step(self, batch: int) -> Step:
        self.t += 1
        land_writes(self.writes, self.lookup, self.t)
        k = self.lookup[batch]
        tokens, drafted = self.advance(batch, k if self.proposed < 0 else self.proposed)
        self.proposed = k
        seconds = self.seconds(batch, drafted) * self.host(self.t) * math.exp(
            self.rng.gauss(0.0, self.noise))
        self.steps_at[k] += 1
        if self.counts:
            return Step(batch, k, seconds, tokens, drafted, True, *self.last)
        return Step(batch, k, seconds, tokens, drafted)

    def write(self, change: tuple[int, int] | None) -> None:
        if change is not None:
            self.writes.append((self.t + 1 + self.lag, *change))

    def run(self, controller: object, batches: int | Iterator[int], steps: int) -> None:
        observe = controller.observe  # type: ignore[attr-defined]
        for _ in range(steps):
            batch = batches if isinstance(batches, int) else next(batches)
            self.write(observe(self.step(batch)))


def fixed_rate(k: int, batch: int, free_mean: float, passage_mean: float, steps: int = 40000,
               seed: int = 12345, **costs: float) -> float:
    """Ground truth: tokens per second with k held fixed at `batch`, noise-free."""
    engine = Passages(seed, [k] * (batch + 1), batch, free_mean, passage_mean, noise=0.0,
                      **costs)
    tokens = seconds = 0.0
    for t in range(steps):
        made, drafted = engine.advance(batch, k)
        if t >= steps // 10:  # past the start, where every row is in free text
            tokens += made
            seconds += engine.seconds(batch, drafted)
    return tokens / seconds


def switchback_trace(seed: int, batch: int, incumbent: int, explored: int, pairs: int,
                     block: int = 7, **engine: float) -> list[list[object]]:
    """Steps of a switchback at `batch`: two blocks of `block` steps at the incumbent, one at
    the explored k, `pairs` times, as rows of a `bucket_visits` trace (batch, k, clean, four
    unused columns, seconds, tokens, drafts)."""
    passages = Passages(seed, [incumbent] * (batch + 1), batch, **engine)
    trace: list[list[object]] = []
    for _ in range(pairs):
        for k in (incumbent, incumbent, explored):
            passages.lookup[batch] = k
            for _ in range(block):
                step = passages.step(batch)
                trace.append([batch, k, True, None, None, None, None, step.seconds, step.tokens,
                              step.drafted])
    return trace

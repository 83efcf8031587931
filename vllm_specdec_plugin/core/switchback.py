"""In-engine switchback measurement: two arms alternate in blocks of steps, per batch bucket.

For benchmarks, never on by default (`VLLM_SPECDEC_SWITCHBACK`). One engine alternates two arms,
for example "k0" (always k=0) against "controller" (the online controller,
`core/schedule_control.py`), in blocks of settled decode steps per batch-size bucket, a pair of
blocks at a time: one block of each arm, in an order drawn at random for each pair (a fixed
order would line up with anything periodic in the traffic, such as requests of one length all
starting together, and bias the ratio). Each pair's second-arm tokens per second over its
first-arm tokens per second is one paired ratio; the report gives, per bucket, the median ratio
with its 90% bootstrap interval and the throughput ratio over the same pairs (total tokens over
total seconds of each arm, `core/paired_stats.throughput_ratio`) with its own: the two differ
where gains are rare and large. Adjacent blocks share the host's state, which two engines or two
bursts do not (docs/schedule-controller.md has the A/A run that shows the noise).

Arms: "k<N>" (that k always, N in the schedule's k set), "static" (the fixed table's k for the
bucket, the controller's prior) and "controller".
"""

from __future__ import annotations

import random
import re
import statistics
from dataclasses import dataclass, field
from typing import Any

from vllm_specdec_plugin.core.paired_stats import bootstrap_median_interval, throughput_ratio
from vllm_specdec_plugin.core.schedule_control import ScheduleController, Step
from vllm_specdec_plugin.core.step_cost import bucket, bucket_label

CONTROLLER_ARM = "controller"
STATIC_ARM = "static"
_FIXED = re.compile(r"k(\d{1,3})")
MAX_BLOCKS = 4096
"""Blocks kept per bucket (a bound on memory; a benchmark run has a few hundred)."""


def parse_arms(text: str, k_set: tuple[int, ...]) -> tuple[str, str]:
    """"A,B" -> (A, B); ValueError naming the bad arm and the choices."""
    arms = tuple(part.strip() for part in text.split(","))
    choices = [f"k{k}" for k in k_set] + [STATIC_ARM, CONTROLLER_ARM]
    if len(arms) != 2:
        raise ValueError(f"{text!r}: two arms separated by a comma, e.g. 'k0,controller'")
    for arm in arms:
        if arm not in choices:
            raise ValueError(f"{arm!r}: an arm is one of {', '.join(choices)}")
    return arms[0], arms[1]


@dataclass
class _Bucket:
    rng: random.Random
    order: list[int] = field(default_factory=lambda: [0, 1])
    """The arms of the pair in progress, in their drawn order; the first runs now."""
    pair: int = 0
    steps: int = 0
    tokens: float = 0.0
    seconds: float = 0.0
    blocks: list[tuple[int, int, float, float]] = field(default_factory=list)
    """(pair, arm index, tokens, seconds) of each closed block, in order."""

    @property
    def arm(self) -> int:
        return self.order[0]

    @classmethod
    def first(cls, key: int) -> _Bucket:
        """Bucket `key` before its first step: its first pair's order drawn, seeded by key."""
        state = cls(random.Random(key))
        state.order = state.rng.sample([0, 1], 2)
        return state


class Switchback:
    """Alternates two arms per bucket; see the module docstring."""

    def __init__(self, controller: ScheduleController, arms: tuple[str, str]) -> None:
        self.controller = controller
        self.arms = arms
        self.block_steps = controller.params.block_steps
        self.buckets: dict[int, _Bucket] = {}
        self._previous_k = -1

    def k_of(self, arm: str, key: int) -> int:
        """The k arm `arm` drafts in bucket `key` now."""
        if arm == CONTROLLER_ARM:
            return self.controller.k_for(key)
        if arm == STATIC_ARM:
            return self.controller.prior_k(key)
        found = _FIXED.fullmatch(arm)
        assert found is not None
        return int(found.group(1))

    def first_k(self, key: int) -> int:
        """The k bucket `key` drafts now: its running arm's, or (a bucket not seen yet) the
        first arm's of the order its first pair will draw."""
        state = self.buckets.get(key)
        return self.k_of(self.arms[(state or _Bucket.first(key)).arm], key)

    def observe(self, step: Step) -> tuple[int, int] | None:
        """One decode step; returns (bucket, k) when the bucket's lookup must change."""
        settled = step.clean and step.k == self._previous_k
        self._previous_k = step.k if step.clean else -1
        key = bucket(step.batch)
        state = self.buckets.get(key)
        if state is None:
            state = self.buckets[key] = _Bucket.first(key)
        arm = self.arms[state.arm]
        change = None
        if arm == CONTROLLER_ARM:
            change = self.controller.observe(step)
        else:  # the controller must not take this arm's steps as settled steps of its own
            self.controller.interrupt()
        if not settled or step.seconds <= 0.0:
            return change
        if step.k != self.k_of(arm, key):
            return change or (key, self.k_of(arm, key))
        state.steps += 1
        state.tokens += step.tokens
        state.seconds += step.seconds
        if state.steps < self.block_steps:
            return change
        if len(state.blocks) < MAX_BLOCKS:
            state.blocks.append((state.pair, state.arm, state.tokens, state.seconds))
        state.order.pop(0)
        if not state.order:  # the pair is done: the next pair's order is drawn
            state.pair += 1
            state.order = state.rng.sample([0, 1], 2)
        state.steps, state.tokens, state.seconds = 0, 0.0, 0.0
        return (key, self.k_of(self.arms[state.arm], key))

    def report(self) -> dict[str, Any]:
        """Per bucket: each arm's tokens/s, and the second arm over the first, paired."""
        out: dict[str, Any] = {"arms": list(self.arms), "buckets": {}}
        for key, state in sorted(self.buckets.items()):
            out["buckets"][bucket_label(key)] = paired_report(state.blocks, self.arms)
        return out


def paired_report(blocks: list[tuple[int, int, float, float]], arms: tuple[str, str]
                  ) -> dict[str, Any]:
    """Per complete pair, the second arm's tokens/s over the first's."""
    pairs: dict[int, dict[int, tuple[float, float]]] = {}
    for pair, arm, tokens, seconds in blocks:
        if seconds > 0:
            pairs.setdefault(pair, {})[arm] = (tokens, seconds)
    # (tokens, seconds) of the second arm, then of the first, per complete pair
    complete = [(*arms_of[1], *arms_of[0]) for arms_of in pairs.values()
                if len(arms_of) == 2 and arms_of[0][0] > 0]
    ratios = [(tb / sb) / (ta / sa) for tb, sb, ta, sa in complete]
    totals = {}
    for index, name in enumerate(arms):
        tokens = sum(t for _, a, t, _ in blocks if a == index)
        seconds = sum(s for _, a, _, s in blocks if a == index)
        totals[f"arm{index}"] = {"arm": name,
                                 "blocks": sum(1 for _, a, *_ in blocks if a == index),
                                 "tokens": tokens,
                                 "tokens_per_s": tokens / seconds if seconds > 0 else None}
    interval = bootstrap_median_interval(ratios, resamples=2000) if ratios else None
    throughput = throughput_ratio(complete)
    return {**totals, "pairs": len(ratios),
            "ratio": statistics.median(ratios) if ratios else None,
            "low": interval[0] if interval else None,
            "high": interval[1] if interval else None,
            "throughput_ratio": throughput[0] if throughput else None,
            "throughput_low": throughput[1] if throughput else None,
            "throughput_high": throughput[2] if throughput else None}

"""The adaptive proposer's policy: acceptance and step-cost estimates -> draft length per row.

Pure Python, no vLLM: `proposer.py` feeds it what the engine shows the proposer each step.

The model. A row's draft is accepted token by token until the first miss; the first token is
accepted with chance `a1`, each later one (given the ones before were) with `a2`, so the j-th
token adds `a1 * a2 ** (j - 1)` expected tokens (both estimated per row, see `Acceptance`).
A step that verifies N tokens (one per row plus the drafted ones) costs
`fixed + per_token * N` seconds, plus `switch` when any row drafts (vLLM then runs its
rejection sampler). Drafting one more token pays when it raises the step's expected
tokens per second: `value / per_token > (rows + expected) / step_time`. Under load the right-hand
side approaches one token per verified slot, so only drafts that are (almost) surely accepted
stay; at batch 1 the fixed cost dominates and long drafts pay even at modest acceptance.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

# A step's fixed cost, in verified-token equivalents, before any timing is seen (the CPU test
# engine measured about 16; GPUs at small batch are far higher). Timings replace it quickly.
PRIOR_FIXED_TOKENS = 16.0
# The rejection sampler's extra cost when any row drafts, as a fraction of the fixed cost.
PRIOR_SWITCH_FRACTION = 0.05
# Pseudo-observations the prior is worth against measured steps.
PRIOR_WEIGHT = 8.0
# Forgetting factor per measured step (about the last ~200 steps count).
COST_FORGET = 0.995
# Per-row acceptance: decay per scored draft, and the prior's weight in positions.
ROW_DECAY = 0.85
ROW_PRIOR_WEIGHT = 2.0
GLOBAL_DECAY = 0.995
GLOBAL_PRIOR_ALPHA = (0.5, 0.7)
GLOBAL_PRIOR_WEIGHT = 4.0


@dataclass
class Acceptance:
    """Decayed counts of accepted and rejected draft positions (Beta posteriors' evidence).

    The first position and the later ones are counted apart: text that is being copied keeps
    being copied, so once a draft's first token is accepted the next ones are accepted more
    often than the first was (a copy run), and a long draft pays only then.
    """

    first_hits: float = 0.0
    first_misses: float = 0.0
    later_hits: float = 0.0
    later_misses: float = 0.0

    def observe(self, hits: int, misses: int, decay: float) -> None:
        """Add one draft's outcome: `hits` accepted positions, then `misses` (0 or 1) rejected."""
        weight = decay  # per draft (or shadow draft): a row remembers its last few steps
        first_hit = 1 if hits else 0
        self.first_hits = self.first_hits * weight + first_hit
        self.first_misses = self.first_misses * weight + (misses if not hits else 0)
        self.later_hits = self.later_hits * weight + max(hits - 1, 0)
        self.later_misses = self.later_misses * weight + (misses if hits else 0)

    def alpha(self, prior: tuple[float, float], prior_weight: float) -> tuple[float, float]:
        """Posterior means of (first position accepted, a later one accepted given the one
        before was)."""
        first = ((self.first_hits + prior[0] * prior_weight)
                 / (self.first_hits + self.first_misses + prior_weight))
        later = ((self.later_hits + prior[1] * prior_weight)
                 / (self.later_hits + self.later_misses + prior_weight))
        return first, later


def outcome(candidate: Sequence[int], actual: Sequence[int]) -> tuple[int, int]:
    """(accepted positions, rejected positions) of `candidate` against the tokens that came.

    `actual` is what the engine emitted for the row this step (accepted drafts plus the bonus
    token), i.e. the true continuation for `len(actual)` positions. A candidate that was never
    drafted is scored the same way ("shadow" drafting): the first position is always checked,
    so rows that draft nothing still learn whether drafting would pay.
    """
    hits = 0
    limit = min(len(candidate), len(actual))
    while hits < limit and candidate[hits] == actual[hits]:
        hits += 1
    return hits, int(hits < limit)


@dataclass(frozen=True)
class StepCost:
    """Seconds per engine step: fixed + per_token * verified tokens (+ switch if any drafts)."""

    fixed: float
    per_token: float
    switch: float

    def seconds(self, tokens: float, drafted: bool) -> float:
        return self.fixed + self.per_token * tokens + (self.switch if drafted else 0.0)


class StepCostModel:
    """Online least squares of step time on (1, verified tokens, any drafts), with forgetting.

    The prior enters as pseudo-observations scaled to the measured mean step time, so it holds
    on any hardware until the engine's own timings (varying batch sizes and draft lengths) pin
    the coefficients down.
    """

    def __init__(self, forget: float = COST_FORGET, prior_weight: float = PRIOR_WEIGHT,
                 prior_fixed_tokens: float = PRIOR_FIXED_TOKENS,
                 prior_switch_fraction: float = PRIOR_SWITCH_FRACTION) -> None:
        self.forget = forget
        self.prior_weight = prior_weight
        self.prior = np.array([prior_fixed_tokens, 1.0,
                               prior_switch_fraction * prior_fixed_tokens])
        self._xx = np.zeros((3, 3))
        self._xy = np.zeros(3)
        self._weight = 0.0
        self._sum_y = 0.0
        self._sum_tokens = 0.0
        self._cached: StepCost | None = None
        self.observations = 0

    def observe(self, tokens: int, drafted: bool, seconds: float) -> None:
        """One measured step: `tokens` verified (rows + drafted tokens) in `seconds`."""
        x = np.array([1.0, float(tokens), 1.0 if drafted else 0.0])
        f = self.forget
        self._xx = self._xx * f + np.outer(x, x)
        self._xy = self._xy * f + x * seconds
        self._weight = self._weight * f + 1.0
        self._sum_y = self._sum_y * f + seconds
        self._sum_tokens = self._sum_tokens * f + tokens
        self._cached = None
        self.observations += 1

    def estimate(self) -> StepCost | None:
        """The current coefficients, or None before any step was measured."""
        if self._weight == 0.0:
            return None
        if self._cached is not None:
            return self._cached
        mean_y, mean_tokens = self._sum_y / self._weight, self._sum_tokens / self._weight
        # The prior's shape, scaled so it predicts the mean measured step.
        scale = mean_y / (self.prior[0] + mean_tokens)
        theta_prior = self.prior * scale
        xx, xy = self._xx.copy(), self._xy.copy()
        points = (max(1.0, mean_tokens / 2), mean_tokens, 2 * mean_tokens + 1)
        for tokens in points:
            for drafted in (0.0, 1.0):
                x = np.array([1.0, tokens, drafted])
                w = self.prior_weight / (2 * len(points))
                xx += w * np.outer(x, x)
                xy += w * x * float(theta_prior @ x)
        try:
            theta = np.linalg.solve(xx, xy)
        except np.linalg.LinAlgError:
            theta = theta_prior
        fixed = max(float(theta[0]), 0.0)
        # A verified token never costs less than a hundredth of the prior's guess.
        per_token = max(float(theta[1]), 0.01 * float(theta_prior[1]))
        self._cached = StepCost(fixed, per_token, max(float(theta[2]), 0.0))
        return self._cached


def expected_tokens(limit: int, alpha: tuple[float, float]) -> float:
    """Expected accepted tokens of a `limit`-token draft."""
    total, value = 0.0, alpha[0]
    for _ in range(limit):
        total += value
        value *= alpha[1]
    return total


def plan_draft_lengths(limits: Sequence[int], alphas: Sequence[tuple[float, float]], rows: int,
                       cost: StepCost | None) -> list[int]:
    """How many tokens each candidate row drafts this step.

    `limits[i]` is the longest draft row i has a candidate for (0: none), `alphas[i]` its
    acceptance estimate (first position, later positions), `rows` the batch size (rows
    decoding this step, drafting or not). Tokens are added best first while each raises
    expected tokens per second; then the whole plan must beat drafting nothing, including the
    switch cost.
    """
    lengths = [0] * len(limits)
    if cost is None:
        return lengths
    items: list[tuple[float, int]] = []
    for row, (limit, alpha) in enumerate(zip(limits, alphas, strict=True)):
        value = alpha[0]
        for _ in range(limit):
            items.append((value, row))
            value *= alpha[1]
    if not items:
        return lengths
    items.sort(key=lambda item: -item[0])
    tokens = float(rows)  # expected tokens emitted this step
    drafted = 0
    for value, row in items:
        step = cost.seconds(rows + drafted, drafted > 0)
        # Marginal tokens per marginal second must beat the current tokens per second.
        if value * step <= cost.per_token * tokens:
            break
        lengths[row] += 1
        tokens += value
        drafted += 1
    if drafted and tokens * cost.seconds(rows, False) <= rows * cost.seconds(rows + drafted, True):
        return [0] * len(limits)
    return lengths

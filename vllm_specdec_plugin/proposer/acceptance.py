"""How likely a drafted token is accepted: pooled by features, shrunk to the row, calibrated.

Pure Python, no vLLM. A draft is accepted token by token until the first miss, so the model
estimates, for the token at draft position j, the chance it is accepted given the ones before
were. Three layers:

1. `PooledAcceptance`: decayed hit/trial counts pooled across all rows, by feature: the
   candidate's source (`ngram`, `suffix`), the position bucket (1, 2, 3-4, 5-8, 9+), the
   candidate's strength (the suffix tree's mean token probability in three bands; for n-gram
   candidates the match length, 3 or 4-5 tokens, `candidates.NGRAM_LONG`) and whether
   the row's last scored candidate of that source was matched in full (a copy run goes on).
   Pooling is what lets a new row, or a row that never drafts and so never observes position
   2 and later, start from what similar candidates did instead of a flat prior.
2. The row's own history (`RowEvidence`): its decayed hits against what the pooled rates
   expected for the same positions; their ratio, shrunk towards 1 by `ROW_SHRINK`
   pseudo-trials, scales the pooled rates for that row.
3. `Calibration`: per source, decayed realised accepted tokens over predicted ones for the
   drafts actually sent. The proposer drafts the source with the larger estimate, so the chosen
   estimate is biased upwards (the winner's curse, 1.4-2.3x at batch 16 in a replay of the old
   policy); this ratio measures and removes that bias.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass, field

SOURCES = ("ngram", "suffix")
# Draft positions (1-based) that start each bucket: 1, 2, 3-4, 5-8, 9+.
POSITION_STARTS = (1, 2, 3, 5, 9)
STRENGTH_BANDS = (0.5, 0.8)  # suffix mean token probability: < 0.5, < 0.8, >= 0.8
PRIOR_RATE = (0.3, 0.6, 0.7, 0.75, 0.8)  # per position bucket, before any evidence
PRIOR_TRIALS = 4.0
POOLED_DECAY = 0.998  # per observation of a feature key
ROW_DECAY = 0.85  # per scored candidate of a row
ROW_SHRINK = 2.0
MAX_RATE = 0.995
CALIBRATION_DECAY = 0.99
CALIBRATION_PRIOR = 4.0  # predicted tokens' worth of "calibrated" before any draft was sent
CALIBRATION_RANGE = (0.2, 1.25)


def position_bucket(position: int) -> int:
    """Bucket index of a 1-based draft position."""
    for index in range(len(POSITION_STARTS) - 1, -1, -1):
        if position >= POSITION_STARTS[index]:
            return index
    return 0


# position (1-based, up to 64) -> bucket index, so the per-token loops index a tuple.
_BUCKET_OF = tuple(position_bucket(p) for p in range(65))


def strength_band(source: str, mean_prob: float | None) -> int:
    """A suffix candidate's strength band, by mean token probability (n-gram candidates get
    theirs from their match length, `candidates.CandidateFinder.find`)."""
    if source != "suffix" or mean_prob is None:
        return 0
    return sum(mean_prob >= band for band in STRENGTH_BANDS)


def bucket_counts(hits: int, misses: int, start: int = 0) -> list[tuple[int, int, int]]:
    """(bucket, accepted, trials) of one scored candidate: positions start+1..hits accepted,
    then position hits+1 rejected when `misses` (`start` > 0: the positions up to it were
    counted already, a shadow candidate followed over cycles)."""
    last = hits + (1 if misses else 0)
    out = []
    for index, first in enumerate(POSITION_STARTS):
        end = POSITION_STARTS[index + 1] - 1 if index + 1 < len(POSITION_STARTS) else last
        first = max(first, start + 1)
        if first > last:
            break
        if first > end:
            continue
        trials = min(end, last) - first + 1
        accepted = max(0, min(end, hits) - first + 1)
        out.append((index, accepted, trials))
    return out


@functools.lru_cache(maxsize=8192)
def _bucket_counts(hits: int, misses: int, start: int) -> tuple[tuple[int, int, int], ...]:
    """`bucket_counts`, cached: the same few (hits, misses, start) come every cycle."""
    return tuple(bucket_counts(hits, misses, start))


def _posterior(hits: float, trials: float, prior: float) -> float:
    """A bucket's posterior mean acceptance: its decayed counts with `PRIOR_TRIALS`
    pseudo-trials at the prior rate."""
    return (hits + PRIOR_TRIALS * prior) / (trials + PRIOR_TRIALS)


Key = tuple[str, int, bool]  # (source, strength band, last candidate matched in full)


class PooledAcceptance:
    """Decayed hit and trial counts per (source, strength, last full) and position bucket."""

    def __init__(self) -> None:
        self._hits: dict[Key, list[float]] = {}
        self._trials: dict[Key, list[float]] = {}
        self._rates: dict[Key, tuple[float, ...]] = {}

    def rates(self, key: Key) -> tuple[float, ...]:
        """Posterior mean acceptance per position bucket for `key` (cached until observed)."""
        cached = self._rates.get(key)
        if cached is None:
            hits = self._hits.get(key)
            trials = self._trials.get(key)
            if hits is None or trials is None:
                cached = PRIOR_RATE
            else:
                cached = tuple(_posterior(h, t, p)
                               for h, t, p in zip(hits, trials, PRIOR_RATE, strict=True))
            self._rates[key] = cached
        return cached

    def observe(self, key: Key, hits: int, misses: int, start: int = 0) -> float:
        """Count one scored candidate (its positions after `start`); returns the accepted
        tokens the rates expected for them (the sum over those positions of the rate before
        this observation). Called for every followed candidate every cycle, so it reads only
        the buckets it touches."""
        hit_counts = self._hits.get(key)
        trial_counts = self._trials.get(key)
        if hit_counts is None or trial_counts is None:
            hit_counts = self._hits[key] = [0.0] * len(POSITION_STARTS)
            trial_counts = self._trials[key] = [0.0] * len(POSITION_STARTS)
        expected = 0.0
        for index, accepted, trials in _bucket_counts(hits, misses, start):
            h, t = hit_counts[index], trial_counts[index]
            expected += _posterior(h, t, PRIOR_RATE[index]) * trials
            hit_counts[index] = h * POOLED_DECAY + accepted
            trial_counts[index] = t * POOLED_DECAY + trials
        self._rates.pop(key, None)
        return expected

    def table(self) -> dict[str, list[float]]:
        """Every observed key's rates (for the statistics file)."""
        return {f"{s}/band{b}/{'full' if f else 'partial'}": [round(r, 3) for r in self.rates(
            (s, b, f))] for (s, b, f) in sorted(self._hits)}


@dataclass
class RowEvidence:
    """A row's decayed hits against what the pooled rates expected, per source."""

    hits: dict[str, float] = field(default_factory=lambda: dict.fromkeys(SOURCES, 0.0))
    expected: dict[str, float] = field(default_factory=lambda: dict.fromkeys(SOURCES, 0.0))
    last_full: dict[str, bool] = field(default_factory=lambda: dict.fromkeys(SOURCES, False))

    def observe(self, source: str, hits: int, expected: float, full: bool) -> None:
        self.hits[source] = self.hits[source] * ROW_DECAY + hits
        self.expected[source] = self.expected[source] * ROW_DECAY + expected
        self.last_full[source] = full

    def factor(self, source: str) -> float:
        """The row's realised over expected hits, shrunk towards 1."""
        return (self.hits[source] + ROW_SHRINK) / (self.expected[source] + ROW_SHRINK)


class Calibration:
    """Per source: realised accepted tokens of sent drafts over their predicted tokens."""

    def __init__(self) -> None:
        self.predicted = dict.fromkeys(SOURCES, 0.0)
        self.realised = dict.fromkeys(SOURCES, 0.0)

    def observe(self, source: str, predicted: float, realised: int) -> None:
        d = CALIBRATION_DECAY
        self.predicted[source] = self.predicted[source] * d + predicted
        self.realised[source] = self.realised[source] * d + realised

    def factor(self, source: str) -> float:
        ratio = ((self.realised[source] + CALIBRATION_PRIOR)
                 / (self.predicted[source] + CALIBRATION_PRIOR))
        low, high = CALIBRATION_RANGE
        return min(max(ratio, low), high)


def token_values(rates: Sequence[float], row_factor: float, limit: int,
                 scale: float = 1.0) -> list[float]:
    """Expected tokens each drafted position adds: position j adds the chance that tokens 1..j
    are all accepted, times `scale` (the source's `Calibration.factor`; 1: uncalibrated)."""
    values, value = [], 1.0
    for position in range(1, limit + 1):
        value *= min(MAX_RATE, rates[_BUCKET_OF[min(position, 64)]] * row_factor)
        values.append(scale * value)
    return values

"""How likely a drafted token is accepted: pooled by features, shrunk to the row, calibrated.

Pure Python, no vLLM. A draft is accepted token by token until the first miss, so the model
estimates, for the token at draft position j, the chance it is accepted given the ones before
were. Three layers:

1. `PooledAcceptance`: decayed hit/trial counts pooled across all rows, by feature: the
   candidate's source (`ngram`, `suffix`), the position bucket (1, 2, 3-4, 5-8, 9+), the
   candidate's strength (the suffix tree's mean token probability in three bands; for n-gram
   candidates the match length, 3 or 4-5 tokens, `AdaptiveParams.ngram_long`) and whether
   the row's last scored candidate of that source was matched in full (a copy run goes on).
   Pooling is what lets a new row, or a row that never drafts and so never observes position
   2 and later, start from what similar candidates did instead of a flat prior.
2. The row's own history (`RowEvidence`): its decayed hits against what the pooled rates
   expected for the same positions; their ratio, shrunk towards 1 by `row_shrink`
   pseudo-trials, scales the pooled rates for that row.
3. `Calibration`: per source, decayed realised accepted tokens over predicted ones for the
   drafts actually sent. The proposer drafts the source with the larger estimate, so the chosen
   estimate is biased upwards (the winner's curse, 1.4-2.3x at batch 16 in a replay of the old
   policy); this ratio measures and removes that bias.

The tunables are fields of `params.AdaptiveParams`; each class and function takes them
(`ADAPTIVE_PARAMS` unless given).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass, field

from vllm_specdec_plugin.proposer.params import ADAPTIVE_PARAMS, AdaptiveParams

SOURCES = ("ngram", "suffix")
_STARTS = ADAPTIVE_PARAMS.position_starts


def position_bucket(position: int, starts: tuple[int, ...] = _STARTS) -> int:
    """Bucket index of a 1-based draft position (`AdaptiveParams.position_starts`)."""
    for index in range(len(starts) - 1, -1, -1):
        if position >= starts[index]:
            return index
    return 0


@functools.cache
def _bucket_of(starts: tuple[int, ...]) -> tuple[int, ...]:
    """position (1-based, up to 64) -> bucket index, so the per-token loops index a tuple."""
    return tuple(position_bucket(p, starts) for p in range(65))


def strength_band(source: str, mean_prob: float | None,
                  bands: tuple[float, ...] = ADAPTIVE_PARAMS.strength_bands) -> int:
    """A suffix candidate's strength band, by mean token probability (n-gram candidates get
    theirs from their match length, `candidates.CandidateFinder.find`)."""
    if source != "suffix" or mean_prob is None:
        return 0
    return sum(mean_prob >= band for band in bands)


def bucket_counts(hits: int, misses: int, start: int = 0,
                  starts: tuple[int, ...] = _STARTS) -> list[tuple[int, int, int]]:
    """(bucket, accepted, trials) of one scored candidate: positions start+1..hits accepted,
    then position hits+1 rejected when `misses` (`start` > 0: the positions up to it were
    counted already, a shadow candidate followed over cycles)."""
    last = hits + (1 if misses else 0)
    out = []
    for index, first in enumerate(starts):
        end = starts[index + 1] - 1 if index + 1 < len(starts) else last
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
def _bucket_counts(hits: int, misses: int, start: int, starts: tuple[int, ...]
                   ) -> tuple[tuple[int, int, int], ...]:
    """`bucket_counts`, cached: the same few (hits, misses, start) come every cycle."""
    return tuple(bucket_counts(hits, misses, start, starts))


def _posterior(hits: float, trials: float, prior: float, prior_trials: float) -> float:
    """A bucket's posterior mean acceptance: its decayed counts with `prior_trials`
    pseudo-trials at the prior rate."""
    return (hits + prior_trials * prior) / (trials + prior_trials)


Key = tuple[str, int, bool]  # (source, strength band, last candidate matched in full)


class PooledAcceptance:
    """Decayed hit and trial counts per (source, strength, last full) and position bucket."""

    def __init__(self, params: AdaptiveParams = ADAPTIVE_PARAMS) -> None:
        self.params = params
        self._hits: dict[Key, list[float]] = {}
        self._trials: dict[Key, list[float]] = {}
        self._rates: dict[Key, tuple[float, ...]] = {}

    def rates(self, key: Key) -> tuple[float, ...]:
        """Posterior mean acceptance per position bucket for `key` (cached until observed)."""
        cached = self._rates.get(key)
        if cached is None:
            hits = self._hits.get(key)
            trials = self._trials.get(key)
            prior, prior_trials = self.params.prior_rate, self.params.prior_trials
            if hits is None or trials is None:
                cached = prior
            else:
                cached = tuple(_posterior(h, t, p, prior_trials)
                               for h, t, p in zip(hits, trials, prior, strict=True))
            self._rates[key] = cached
        return cached

    def observe(self, key: Key, hits: int, misses: int, start: int = 0) -> float:
        """Count one scored candidate (its positions after `start`); returns the accepted
        tokens the rates expected for them (the sum over those positions of the rate before
        this observation). Called for every followed candidate every cycle, so it reads only
        the buckets it touches."""
        p = self.params
        hit_counts = self._hits.get(key)
        trial_counts = self._trials.get(key)
        if hit_counts is None or trial_counts is None:
            hit_counts = self._hits[key] = [0.0] * len(p.position_starts)
            trial_counts = self._trials[key] = [0.0] * len(p.position_starts)
        expected, decay = 0.0, p.pooled_decay
        for index, accepted, trials in _bucket_counts(hits, misses, start, p.position_starts):
            h, t = hit_counts[index], trial_counts[index]
            expected += _posterior(h, t, p.prior_rate[index], p.prior_trials) * trials
            hit_counts[index] = h * decay + accepted
            trial_counts[index] = t * decay + trials
        self._rates.pop(key, None)
        return expected

    def table(self) -> dict[str, list[float]]:
        """Every observed key's rates (for the statistics file)."""
        return {f"{s}/band{b}/{'full' if f else 'partial'}": [round(r, 3) for r in self.rates(
            (s, b, f))] for (s, b, f) in sorted(self._hits)}


@dataclass
class RowEvidence:
    """A row's decayed hits against what the pooled rates expected, per source."""

    params: AdaptiveParams = field(default=ADAPTIVE_PARAMS, repr=False, compare=False)
    hits: dict[str, float] = field(default_factory=lambda: dict.fromkeys(SOURCES, 0.0))
    expected: dict[str, float] = field(default_factory=lambda: dict.fromkeys(SOURCES, 0.0))
    last_full: dict[str, bool] = field(default_factory=lambda: dict.fromkeys(SOURCES, False))

    def observe(self, source: str, hits: int, expected: float, full: bool) -> None:
        decay = self.params.row_decay
        self.hits[source] = self.hits[source] * decay + hits
        self.expected[source] = self.expected[source] * decay + expected
        self.last_full[source] = full

    def factor(self, source: str) -> float:
        """The row's realised over expected hits, shrunk towards 1."""
        shrink = self.params.row_shrink
        return (self.hits[source] + shrink) / (self.expected[source] + shrink)


class Calibration:
    """Per source: realised accepted tokens of sent drafts over their predicted tokens."""

    def __init__(self, params: AdaptiveParams = ADAPTIVE_PARAMS) -> None:
        self.params = params
        self.predicted = dict.fromkeys(SOURCES, 0.0)
        self.realised = dict.fromkeys(SOURCES, 0.0)

    def observe(self, source: str, predicted: float, realised: int) -> None:
        d = self.params.calibration_decay
        self.predicted[source] = self.predicted[source] * d + predicted
        self.realised[source] = self.realised[source] * d + realised

    def factor(self, source: str) -> float:
        prior = self.params.calibration_prior
        ratio = (self.realised[source] + prior) / (self.predicted[source] + prior)
        low, high = self.params.calibration_range
        return min(max(ratio, low), high)


def token_values(rates: Sequence[float], row_factor: float, limit: int, scale: float = 1.0,
                 params: AdaptiveParams = ADAPTIVE_PARAMS) -> list[float]:
    """Expected tokens each drafted position adds: position j adds the chance that tokens 1..j
    are all accepted, times `scale` (the source's `Calibration.factor`; 1: uncalibrated)."""
    values, value = [], 1.0
    max_rate, bucket_of = params.max_rate, _bucket_of(params.position_starts)
    for position in range(1, limit + 1):
        value *= min(max_rate, rates[bucket_of[min(position, 64)]] * row_factor)
        values.append(scale * value)
    return values

"""What speculation buys per batch size: replay counts and a step-cost curve in, speedups out.

Pure (numpy, no I/O). `vllm-specdec whatif` replays the operator's traffic through a method's
matcher and counts, per request, what vLLM's spec-decode counters would count
(`ReplayCounts`); this module prices those counts with one step-cost curve
(`core/step_cost.StepCostCurve`: learned by a running engine, or a prior) and recommends the
method, k and break points the schedule controller would start from.

The model. A request of n output tokens takes a prefill step (its first token) and then n - 1
decode steps without speculation, or `steps` verify steps with it (the same prefill either way,
so it is left out). Over the traffic a row of a verify step emits tau = sum(n - 1) / sum(steps)
tokens, drafts d = sum(drafted) / sum(steps) tokens on average, and drafts at all with share
p = sum(drafting_steps) / sum(steps). At batch b every step verifies b rows:

- with speculation a step costs `curve.seconds(b, b * d, 1 - (1 - p) ** b)` (a step pays the
  switch when any of its b rows drafted; rows taken as independent) and emits b * tau tokens;
- without, a step costs `curve.seconds(b, 0, 0)` and emits b tokens;

so speedup(b) = tau * t_none / t_spec (output tokens per second, speculation over none).

Async scheduling (`hidden_s`): where the plain engine overlaps its host work (scheduling, input
preparation, output processing: h seconds of the step) with the forward pass and the speculating
engine cannot (which is where: `whatif/drafter.async_scheduling`), the plain step is
max(t_none - h, h) (the longer of the forward pass and the host work, each whole) instead of
t_none, with h at most t_none; the speculating step stays t_spec.

What it leaves out: the acceptance is concurrency 1's (each request's drafts do not depend on
its batch neighbours for the n-gram matcher; suffix decoding's cross-request cache is replayed
in traffic order), and a batch is taken as b rows of the traffic's average row.

The interval: a bootstrap over requests (requests drawn with replacement, tau, d and p
recomputed, the speedup priced again; a fixed seed, so the same counts give the same interval),
its percentiles at (1 - confidence) / 2 and 1 - (1 - confidence) / 2. It measures the spread of
the traffic, not the error of the cost curve (`prior_share` says how much of that is a prior).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from vllm_specdec_plugin.core.schedule import SCHEDULE_OPEN_END
from vllm_specdec_plugin.core.step_cost import StepCostCurve, bucket

BOOTSTRAP_CHUNK_ELEMENTS = 1 << 18
"""Request draws held at once by the bootstrap (8 bytes each, and as many for the one counter
gathered at a time: 4 MiB), whatever the number of requests and resamples."""


class _Counted(Protocol):
    """Anything with the per-request count arrays (`whatif/types.ReplayResult`)."""

    @property
    def output_tokens(self) -> np.ndarray: ...
    @property
    def steps(self) -> np.ndarray: ...
    @property
    def drafting_steps(self) -> np.ndarray: ...
    @property
    def drafted(self) -> np.ndarray: ...


@dataclass(frozen=True, eq=False)
class ReplayCounts:
    """One configuration's replay, per request (equal-length 1-D arrays, traffic order)."""

    output_tokens: np.ndarray
    """Output tokens of the request (its first comes from the prefill)."""
    steps: np.ndarray
    """Verify steps after the prefill, with speculation."""
    drafting_steps: np.ndarray
    """Of those, the steps that verified at least one drafted token."""
    drafted: np.ndarray
    """Drafted tokens verified over all its steps."""

    def __post_init__(self) -> None:
        arrays = (self.output_tokens, self.steps, self.drafting_steps, self.drafted)
        lengths = {np.shape(a) for a in arrays}
        if len(lengths) != 1 or len(next(iter(lengths))) != 1:
            raise ValueError(f"replay counts must be equal-length 1-D arrays, got {lengths}")
        if any(np.any(np.asarray(a) < 0) for a in arrays):
            raise ValueError("replay counts must not be negative")

    @classmethod
    def of(cls, result: _Counted) -> ReplayCounts:
        """The counts of a replay result (`whatif/types.ReplayResult`)."""
        return cls(result.output_tokens, result.steps, result.drafting_steps, result.drafted)

    def columns(self) -> np.ndarray:
        """(requests, 4) float64: tokens after the first, steps, drafting steps, drafted."""
        emitted = np.clip(np.asarray(self.output_tokens, dtype=np.float64) - 1.0, 0.0, None)
        return np.stack([emitted, np.asarray(self.steps, dtype=np.float64),
                         np.asarray(self.drafting_steps, dtype=np.float64),
                         np.asarray(self.drafted, dtype=np.float64)], axis=1)


@dataclass(frozen=True)
class Predicted:
    """The predicted speedup at one batch size, with its bootstrap interval."""

    batch: int
    speedup: float
    low: float
    high: float

    def as_dict(self) -> dict[str, float]:
        """`{batch, speedup, low, high}`, as whatif's JSON writes it."""
        return {"batch": self.batch, "speedup": self.speedup, "low": self.low,
                "high": self.high}


def _rates(totals: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """tau, d and p from summed columns (..., 4); no steps: tau 1, nothing drafted."""
    emitted, steps, drafting, drafted = (totals[..., i] for i in range(4))
    has = steps > 0
    safe = np.where(has, steps, 1.0)
    return (np.where(has, emitted / safe, 1.0), np.where(has, drafted / safe, 0.0),
            np.where(has, drafting / safe, 0.0))


def _resampled_totals(columns: np.ndarray, resamples: int, seed: int) -> np.ndarray:
    """(resamples, 4): the columns summed over requests drawn with replacement, in chunks of
    at most `BOOTSTRAP_CHUNK_ELEMENTS` draws."""
    rng = np.random.default_rng(seed)
    n = len(columns)
    per_chunk = max(1, BOOTSTRAP_CHUNK_ELEMENTS // n)
    by_counter = np.ascontiguousarray(columns.T)  # one 1-D gather per counter: 5x faster
    out = np.empty((resamples, 4))
    for start in range(0, resamples, per_chunk):
        stop = min(resamples, start + per_chunk)
        drawn = rng.integers(0, n, size=(stop - start, n))
        for i in range(4):
            out[start:stop, i] = by_counter[i][drawn].sum(axis=1)
    return out


def plain_step(t_none: float, hidden_s: float) -> float:
    """The plain engine's step where async scheduling overlaps `hidden_s` of host work with the
    forward pass (the module docstring's model): max(t_none - h, h), h at most t_none."""
    host = min(hidden_s, t_none)
    return max(t_none - host, host)


def _speedups(curve: StepCostCurve, batch: int, tau: np.ndarray, d: np.ndarray,
              p: np.ndarray, hidden_s: float) -> np.ndarray:
    """speedup(batch) for arrays of tau, d, p. A curve's step time is affine in the drafted
    tokens and the drafting share, so three of its values price every resample at once."""
    none = curve.seconds(batch, 0.0, 0.0)
    switch = curve.seconds(batch, 0.0, 1.0) - none
    per_token = curve.seconds(batch, 1.0, 0.0) - none
    spec = none + switch * (1.0 - (1.0 - p) ** batch) + per_token * batch * d
    result: np.ndarray = tau * plain_step(none, hidden_s) / spec
    return result


def predict(counts: ReplayCounts, curve: StepCostCurve, batches: Sequence[int],
            resamples: int = 1000, seed: int = 0, confidence: float = 0.9,
            hidden_s: float = 0.0) -> list[Predicted]:
    """The predicted speedup against no speculation at each of `batches`, with its interval
    (the module docstring's model). `hidden_s`: the host seconds per step the plain engine's
    async scheduling hides where the speculating engine runs synchronously (0: both engines
    schedule alike). Degenerate counts (no verify step, or one request) give an interval of
    the point itself."""
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be between 0 and 1, got {confidence}")
    if resamples < 1:
        raise ValueError(f"resamples must be at least 1, got {resamples}")
    if not (math.isfinite(hidden_s) and hidden_s >= 0.0):
        raise ValueError(f"hidden host seconds must be finite and not negative, got {hidden_s}")
    columns = counts.columns()
    tau, d, p = (float(x) for x in _rates(columns.sum(axis=0)))
    degenerate = len(columns) < 2 or columns[:, 1].sum() == 0
    boot = None if degenerate else _rates(_resampled_totals(columns, resamples, seed))
    tail = 100.0 * (1.0 - confidence) / 2.0
    out = []
    for batch in batches:
        if batch < 1:
            raise ValueError(f"batch sizes start at 1, got {batch}")
        t_none = curve.seconds(batch, 0.0, 0.0)
        t_spec = curve.seconds(batch, batch * d, 1.0 - (1.0 - p) ** batch)
        if not t_none > 0.0 or not t_spec > 0.0:
            raise ValueError(f"{curve.source}: a step at batch {batch} must take some time")
        speedup = tau * plain_step(t_none, hidden_s) / t_spec
        low = high = speedup
        if boot is not None:
            low, high = (float(x) for x in np.percentile(_speedups(curve, batch, *boot, hidden_s),
                                                         [tail, 100.0 - tail]))
            # the percentiles of a spread-less traffic can miss the point by a rounding
            low, high = min(low, speedup), max(high, speedup)
        out.append(Predicted(int(batch), speedup, low, high))
    return out


@dataclass(frozen=True, eq=False)
class Recommendation:
    """What the predictions recommend; options are named by the caller ("ngram k=3")."""

    per_batch: tuple[tuple[int, str | None], ...]
    """(batch, the option with the highest speedup among those whose interval is above 1;
    None: no speculation) per predicted batch, smallest first."""
    break_point: int | None
    """The smallest batch where no option's interval is above 1 (speculation stops paying);
    None when some option pays at every predicted batch."""
    best: str | None
    """The best option at the smallest predicted batch (None: nothing pays there)."""
    k: int
    """Its k (0 when `best` is None)."""
    schedule: list[list[int]] | None
    """A `num_speculative_tokens_per_batch_size` for `best`'s method (else the method of the
    first batch's option that pays), in vLLM's form and
    `core/schedule.load_aware_schedule`'s: inclusive [first batch, last batch, k] ranges from
    1 up to `SCHEDULE_OPEN_END`, each batch at that method's best paying k (0 where none
    pays); None when nothing pays at any batch."""

    @property
    def num_speculative_tokens(self) -> int:
        """The k to configure beside `schedule` (vLLM caps the schedule's k at it)."""
        return max((k for _, _, k in self.schedule or []), default=self.k)


def _best(options: Mapping[str, Sequence[Predicted]], k_of: Mapping[str, int],
          names: Sequence[str], batch: int) -> str | None:
    """The paying option at `batch` with the highest speedup (ties: the smaller k)."""
    paying = [(p.speedup, -k_of[name], name) for name in names for p in options[name]
              if p.batch == batch and p.low > 1.0]
    return max(paying)[2] if paying else None


def recommend(options: Mapping[str, Sequence[Predicted]], k_of: Mapping[str, int],
              method_of: Mapping[str, str] | None = None) -> Recommendation:
    """Per batch the best option, the break point, the best option at the smallest batch and
    a schedule for its method. `k_of` gives each option's k; `method_of` each option's method
    (the schedule keeps to the best option's method: one speculative config runs one method;
    None: all options are one method's)."""
    names = sorted(options)
    batches = sorted({p.batch for name in names for p in options[name]})
    per_batch = tuple((batch, _best(options, k_of, names, batch)) for batch in batches)
    break_point = next((batch for batch, best in per_batch if best is None), None)
    # the schedule's method: the best option's at the smallest batch where one pays
    anchor = next((found for _, found in per_batch if found is not None), None)
    if anchor is None:
        return Recommendation(per_batch, break_point, None, 0, None)
    method = (method_of or {}).get(anchor)
    same = [name for name in names if method_of is None or method_of.get(name) == method]
    schedule: list[list[int]] = []
    for i, batch in enumerate(batches):
        chosen = _best(options, k_of, same, batch)
        k = k_of[chosen] if chosen is not None else 0
        first = 1 if i == 0 else batch
        last = batches[i + 1] - 1 if i + 1 < len(batches) else SCHEDULE_OPEN_END
        if schedule and schedule[-1][2] == k:
            schedule[-1][1] = last  # the same k as the range before: one range
        else:
            schedule.append([first, last, k])
    best = per_batch[0][1]
    return Recommendation(per_batch, break_point, best, k_of[best] if best else 0, schedule)


def prior_share(curve: StepCostCurve, batches: Sequence[int]) -> float:
    """The share of `batches` whose bucket the curve prices from a prior (not measured)."""
    if not batches:
        return 0.0
    return sum(bucket(b) not in curve.measured for b in batches) / len(batches)

"""What the adaptive proposer learns from its candidates, and what it expects of them.

Pure Python, no vLLM. `AcceptanceLearner` holds the acceptance model (`acceptance.py`: the
pooled rates and the per-source calibration; a row's own evidence lives on its `RowState`) and
keeps it learning:

- `values` and `sent`: a row's best candidate by the model (its calibrated expected tokens per
  draft position) and, once the plan chose its length, what the model predicted for it;
- `score`: last cycle's candidates against the tokens that came. A drafted one at once (the
  engine verified it: pooled rates, calibration, the row's evidence); an undrafted one (a
  "shadow") is followed over the row's next cycles until it misses or ends (`policy.follow`),
  one shadow per source at a time, each position counted in the pooled rates as soon as its
  token came, so every draft position is observed whether or not the row drafts;
- `close`: a departed request's shadows end as matched so far.

Each candidate's whole outcome goes to the row's evidence and, when configured, to the trace
(`trace.py`), which replays the same model offline.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from vllm_specdec_plugin.proposer.acceptance import (
    SOURCES,
    Calibration,
    PooledAcceptance,
    RowEvidence,
    token_values,
)
from vllm_specdec_plugin.proposer.params import ADAPTIVE_PARAMS, AdaptiveParams
from vllm_specdec_plugin.proposer.policy import follow, outcome
from vllm_specdec_plugin.proposer.state import Candidate, RowState
from vllm_specdec_plugin.proposer.trace import TraceWriter


class AcceptanceLearner:
    """The acceptance model and its learning (see the module docstring)."""

    def __init__(self, params: AdaptiveParams = ADAPTIVE_PARAMS,
                 trace: TraceWriter | None = None) -> None:
        self.params = params
        self.pooled = PooledAcceptance(params)
        self.calibration = Calibration(params)
        self.trace = trace

    def factors(self) -> dict[str, float]:
        """Each source's calibration factor now."""
        return {source: self.calibration.factor(source) for source in SOURCES}

    def values(self, candidates: Mapping[str, Candidate], evidence: RowEvidence, limit: int,
               factors: Mapping[str, float]) -> tuple[str | None, list[float]]:
        """(the source of a row's best candidate, the calibrated expected tokens each of its
        first `limit` positions adds); (None, []) when none expects anything."""
        best, best_values, best_sum = None, [], 0.0
        for source, candidate in candidates.items():
            calibrated = token_values(
                self.pooled.rates((source, candidate.band, candidate.full)),
                evidence.factor(source), min(len(candidate.tokens), limit), factors[source],
                self.params)
            total = sum(calibrated)
            if total > best_sum:
                best, best_values, best_sum = source, calibrated, total
        return best, best_values

    @staticmethod
    def sent(candidate: Candidate, length: int, values: Sequence[float],
             factor: float) -> list[int]:
        """The draft of `candidate`'s first `length` tokens, with what the plan counted on
        (calibrated by `factor`) and the model's own prediction recorded on it."""
        candidate.drafted = length
        candidate.calibrated = sum(values[:length])
        candidate.predicted = candidate.calibrated / factor
        return candidate.tokens[:length]

    def score(self, state: RowState, new: Sequence[int], cycle: int, rows: int) -> None:
        """Learn from last cycle's candidates of a row against the tokens that came, `new`
        (see the module docstring); `cycle` and `rows` (the batch size) go to the trace."""
        for source, shadow in list(state.shadows.items()):
            if self._follow(state, source, shadow, new, cycle, rows):
                del state.shadows[source]
        for source, candidate in state.candidates.items():
            if candidate.drafted:
                hits, misses = outcome(candidate.tokens, new)
                self.calibration.observe(source, candidate.predicted,
                                         min(len(new) - 1, candidate.drafted))
                candidate.expected = self.pooled.observe(
                    (source, candidate.band, candidate.full), hits, misses)
                self._learn(state, source, candidate, hits, misses, len(new), cycle, rows)
            elif source not in state.shadows and not self._follow(state, source, candidate,
                                                                  new, cycle, rows):
                state.shadows[source] = candidate
        state.candidates = {}

    def close(self, state: RowState, cycle: int, rows: int) -> None:
        """The request left the batch: its shadows end as matched so far, no miss seen (their
        positions are in the pooled rates already; this closes them in the trace)."""
        for source, shadow in state.shadows.items():
            self._learn(state, source, shadow, shadow.matched, 0, shadow.matched, cycle, rows)
        state.shadows = {}

    def _follow(self, state: RowState, source: str, shadow: Candidate, new: Sequence[int],
                cycle: int, rows: int) -> bool:
        """Compare a shadow's next positions with `new`, count them; True once it resolved."""
        before = shadow.matched
        shadow.matched, missed = follow(shadow.tokens, before, new)
        if shadow.matched > before or missed:
            shadow.expected += self.pooled.observe((source, shadow.band, shadow.full),
                                                   shadow.matched, int(missed), start=before)
        if missed or shadow.matched >= len(shadow.tokens):
            self._learn(state, source, shadow, shadow.matched, int(missed),
                        shadow.matched + int(missed), cycle, rows)
            return True
        return False

    def _learn(self, state: RowState, source: str, candidate: Candidate, hits: int,
               misses: int, observed: int, cycle: int, rows: int) -> None:
        """A candidate's whole outcome (its positions are in the pooled rates already) into the
        row's evidence and the trace."""
        if not (hits or misses):
            return
        state.evidence.observe(source, hits, candidate.expected, full=not misses)
        if self.trace is not None:
            self.trace.write(cycle, rows, state.uid, source, candidate, hits, misses, observed)

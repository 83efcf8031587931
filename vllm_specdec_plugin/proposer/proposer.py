"""The plugin's own draft-free proposer, loaded by vLLM's `custom_class` speculative method.

    speculative_config={"method": "custom_class",
                        "model": "vllm_specdec_plugin.adaptive.AdaptiveProposer",
                        "num_speculative_tokens": 16}

vLLM (0.32 and 0.33, V1 model runner) builds `AdaptiveProposer(vllm_config)` in the worker, calls
`load_model(model)` (CPU runner) and, after each step's bookkeeping,
`propose(sampled_token_ids, num_tokens_no_spec, token_ids_cpu, slot_mappings=...)`, expecting one
draft list per batch row ([] = no draft). Each call (a "cycle"):

1. matches rows to requests (`rows.RowTable`: by vLLM's request ids) and scores last cycle's
   candidates against the tokens that came (`acceptance.py`): a drafted one at once, an
   undrafted one followed over the row's next cycles to its first miss, so every draft position
   is observed whether or not the row drafts;
2. times the cycle since the last call (the proposer's own time included) into the step-cost
   table (`costs.py`), when it was a clean decode cycle;
3. finds candidates for the rows it looks at (all rows when awake, a rotating share when dormant,
   `control.py`): vLLM's own n-gram matcher over prompt + output, and arctic_inference's suffix
   tree (when installed) only where the n-gram candidate is missing or short plus a rotating
   sample of rows, its tree brought up to date lazily from the token array;
4. drafts the tokens that raise expected tokens per second by more than the controller's margin
   (`policy.plan_draft_lengths`).

Any internal error drafts nothing for that cycle and is logged once: the engine never sees it.
`VLLM_SPECDEC_ADAPTIVE_STATS` names a JSON file for its counters (cost per row per cycle, awake
and dormant, overall and by batch size; the cost table, the calibration);
`VLLM_SPECDEC_ADAPTIVE_TRACE` a JSON-lines file of scored candidates for replaying the
acceptance model (`trace.py`); one worker writes each (`stats.worker_paths`).
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from itertools import count
from typing import Any

import numpy as np

from vllm_specdec_plugin.core.methods import ADAPTIVE_CLASS_PATH
from vllm_specdec_plugin.core.settings import ENV_ADAPTIVE_STATS, ENV_ADAPTIVE_TRACE
from vllm_specdec_plugin.proposer.acceptance import (
    SOURCES,
    Calibration,
    PooledAcceptance,
    token_values,
)
from vllm_specdec_plugin.proposer.candidates import CandidateFinder
from vllm_specdec_plugin.proposer.control import DraftController
from vllm_specdec_plugin.proposer.costs import StepCostTable
from vllm_specdec_plugin.proposer.policy import follow, outcome, plan_draft_lengths
from vllm_specdec_plugin.proposer.rows import (
    Candidate,
    RequestLimits,
    RowState,
    RowTable,
    request_end,
)
from vllm_specdec_plugin.proposer.stats import CostByBatch, StatsFile, worker_paths
from vllm_specdec_plugin.proposer.trace import TraceWriter

CLASS_PATH = ADAPTIVE_CLASS_PATH
DEFAULT_NUM_SPECULATIVE_TOKENS = 8
# A gap between calls longer than this many predicted cycles is idle time, not a cycle.
IDLE_FACTOR = 4.0
STATS_EVERY = 25
# The statistics file is written again this long after the last call (the run's tail).
STATS_IDLE_S = 0.5
MAX_REQUEST_CYCLES = 64


class AdaptiveProposer:
    """Draft-free proposer that reads acceptance and load (see the module docstring)."""

    def __init__(self, vllm_config: Any) -> None:
        spec = vllm_config.speculative_config
        self.k = int(spec.num_speculative_tokens or DEFAULT_NUM_SPECULATIVE_TOKENS)
        self.max_model_len = int(vllm_config.model_config.max_model_len)
        max_rows = int(vllm_config.scheduler_config.max_num_seqs)
        from vllm.logger import init_logger

        self._logger = init_logger("vllm.specdec_plugin.adaptive")
        self._finder = CandidateFinder(max_rows, self.k, self.max_model_len)
        self._max_rows = max_rows
        self._table = RowTable(max_rows)
        self.pooled = PooledAcceptance()
        self.calibration = Calibration()
        self.cost = StepCostTable()
        self.control = DraftController()
        self._uids = count()
        self._rows_now = 0
        self.request_cycles: list[int] = []
        """The cycle at which each of the first requests started (for the statistics)."""
        self._last: tuple[float, int, int, float | None] | None = None
        """(start, rows, drafted, baseline seconds) of the last cycle."""
        self._failed = False
        stats_path, trace_path = worker_paths(os.environ.get(ENV_ADAPTIVE_STATS),
                                              os.environ.get(ENV_ADAPTIVE_TRACE))
        self._stats_file = None if not stats_path else StatsFile(
            stats_path, self._stats_document, self._logger, STATS_EVERY, STATS_IDLE_S)
        self._trace = TraceWriter.open(trace_path, self._logger)
        self.cost_by_batch = CostByBatch()
        self.stats: dict[str, float] = {
            "calls": 0, "rows": 0, "overhead_s": 0.0, "requests": 0, "draft_tokens": 0,
            "accepted_tokens": 0, "steps_timed": 0, "errors": 0, "awake_rows": 0,
            "awake_overhead_s": 0.0, "dormant_rows": 0, "dormant_overhead_s": 0.0,
            "probed_rows": 0, "baseline_cycles": 0, "limited_requests": 0}

    wants_request_limits = True
    """Asks vLLM's model runner for its requests (`engine/request_limits.py`)."""
    request_limits: RequestLimits | None = None
    """(request id by batch row, the runner's request states by id), set by the runner before
    each call: which request each row holds (`rows.RowTable.match`) and where it stops (vLLM
    trims drafts to max_model_len only: a draft past max_tokens is verified and thrown away)."""

    def load_model(self, *args: Any, **kwargs: Any) -> None:
        """No model: the CPU model runner calls this for every drafter."""

    def propose(self, sampled_token_ids: list[list[int]], num_tokens_no_spec: np.ndarray,
                token_ids_cpu: np.ndarray, slot_mappings: Any = None) -> list[list[int]]:
        """One draft list per batch row; never raises."""
        if self._stats_file is None:
            return self._cycle(sampled_token_ids, num_tokens_no_spec, token_ids_cpu)
        with self._stats_file.lock:
            drafts = self._cycle(sampled_token_ids, num_tokens_no_spec, token_ids_cpu)
            self._stats_file.called(self.stats)
        return drafts

    def _cycle(self, sampled_token_ids: list[list[int]], num_tokens_no_spec: np.ndarray,
               token_ids_cpu: np.ndarray) -> list[list[int]]:
        start = time.perf_counter()
        dormant = self.control.dormant
        try:
            drafts = self._propose(start, sampled_token_ids, num_tokens_no_spec, token_ids_cpu)
        except Exception:
            self.stats["errors"] += 1
            if not self._failed:
                self._failed = True
                self._logger.exception("adaptive proposer failed; drafting nothing this step "
                                       "(logged once)")
            self._reset()
            drafts = [[] for _ in sampled_token_ids]
        spent = time.perf_counter() - start
        rows = len(sampled_token_ids)
        mode = "dormant" if dormant else "awake"
        self.stats["calls"] += 1
        self.stats["rows"] += rows
        self.stats["overhead_s"] += spent
        self.stats[f"{mode}_rows"] += rows
        self.stats[f"{mode}_overhead_s"] += spent
        self.cost_by_batch.add(mode, rows, spent)
        return drafts

    def _stats_document(self) -> tuple[dict[str, float], dict[str, Any]]:
        return dict(self.stats), {
            "cost_table": self.cost.summary(), "pooled": self.pooled.table(),
            "cost_by_batch": self.cost_by_batch.summary(),
            "calibration": {s: self.calibration.factor(s) for s in self.calibration.predicted},
            "margin": self.control.margin, "dormant": self.control.dormant,
            **self.control.counters, "events": list(self.control.events),
            "request_cycles": list(self.request_cycles),
            "suffix": self._finder.suffix is not None,
            "suffix_calls": self._finder.suffix_calls}

    def _reset(self) -> None:
        """Forget every row (after an internal error): all requests start afresh."""
        self._table = RowTable(len(self._table.counts))
        self._last = None
        self._finder.reset()

    # -- one cycle --------------------------------------------------------------------------

    def _propose(self, now: float, sampled: list[list[int]], num_tokens: np.ndarray,
                 token_ids: np.ndarray) -> list[list[int]]:
        rows = len(sampled)
        if rows > self._max_rows:
            raise ValueError(f"{rows} rows, more than max_num_seqs={self._max_rows}")
        self._rows_now = rows
        lens = np.fromiter(map(len, sampled), dtype=np.int64, count=rows)
        counts = np.asarray(num_tokens[:rows], dtype=np.int64)
        if len(counts) != rows:
            raise ValueError(f"{rows} sampled rows but {len(counts)} token counts")
        states, keys, accepted, fresh = self._match_rows(sampled, lens, counts, token_ids)
        self._time_cycle(now, rows, accepted, clean=not fresh and bool(lens.all()))
        decoding = [i for i in range(rows) if states[i] is not None
                    and counts[i] < self.max_model_len - 1]
        looked = [i for i in decoding if self.control.probes(i) or not _probed(states[i])]
        # vLLM's own int32 counts: the numba matcher was compiled for them (an int64 copy
        # would compile a second specialisation inside the engine, ~1 s)
        candidates = self._finder.find(looked, states, num_tokens, token_ids, self.control.cycle,
                                       dormant=self.control.dormant)
        self.stats["probed_rows"] += len(looked)
        factors = {source: self.calibration.factor(source) for source in SOURCES}
        values: list[list[float]] = []
        chosen: list[tuple[int, str | None]] = []
        for i in looked:
            state = states[i]
            assert state is not None
            best, best_values, best_sum = None, [], 0.0
            # a step emits up to drafted + 1 tokens: draft none past the request's last token
            room = max(min(self.max_model_len, state.end) - 1 - int(counts[i]), 0)
            for source, candidate in candidates[i].items():
                calibrated = token_values(
                    self.pooled.rates((source, candidate.band, candidate.full)),
                    state.evidence.factor(source), min(len(candidate.tokens), self.k, room),
                    factors[source])
                total = sum(calibrated)
                if total > best_sum:
                    best, best_values, best_sum = source, calibrated, total
            values.append(best_values)
            chosen.append((i, best))
        wants_baseline = self.cost.wants_baseline(rows)
        lengths = [0] * len(values) if wants_baseline else plan_draft_lengths(
            values, rows, lambda d: self.cost.seconds(rows, d), self.control.margin)
        self.stats["baseline_cycles"] += int(wants_baseline and any(values))
        drafts: list[list[int]] = [[] for _ in range(rows)]
        drafted = 0
        for state in states:
            if state is not None:
                state.draft = []
        for (i, picked), length, row_values in zip(chosen, lengths, values, strict=True):
            state = states[i]
            assert state is not None
            if picked is None or not length:
                continue
            candidate = candidates[i][picked]
            candidate.drafted = length
            candidate.calibrated = sum(row_values[:length])
            candidate.predicted = candidate.calibrated / factors[picked]
            drafts[i] = state.draft = candidate.tokens[:length]
            drafted += length
        self.control.requests = int(self.stats["requests"])
        self.control.planned(drafted)
        self._table.store(states, counts, token_ids, keys, self._request_ids())
        self._last = (now, rows, drafted, self.cost.baseline(rows))
        self.stats["draft_tokens"] += drafted
        return drafts

    def _match_rows(self, sampled: list[list[int]], lens: np.ndarray, counts: np.ndarray,
                    token_ids: np.ndarray
                    ) -> tuple[list[RowState | None], np.ndarray | None, int, bool]:
        """Each row's state (`RowTable.match`: by vLLM's request id where the runner gives it),
        the rows' keys, the drafted tokens accepted, and whether any row is new; last cycle's
        candidates scored against the tokens that came."""
        states, keys, fresh = self._table.match(sampled, lens, counts, token_ids,
                                                self._request_ids(), self._start, self._stop)
        accepted = 0
        for i, state in enumerate(states):
            if state is None:
                continue
            if state.draft:
                accepted += len(sampled[i]) - 1
            if state.candidates or state.shadows:
                self._score(state, sampled[i])
        self.stats["accepted_tokens"] += accepted
        return states, keys, accepted, fresh

    def _request_ids(self) -> Sequence[str | None] | None:
        """vLLM's request id by batch row, when the runner gave them (`request_limits`)."""
        return None if self.request_limits is None else self.request_limits[0]

    def _start(self, row: int, prompt_len: int) -> RowState:
        self.stats["requests"] += 1
        if len(self.request_cycles) < MAX_REQUEST_CYCLES:
            self.request_cycles.append(self.control.cycle)
        state = RowState(uid=next(self._uids), prompt_len=prompt_len)
        end = request_end(self.request_limits, row)
        if end is not None:
            state.end = end
            self.stats["limited_requests"] += 1
        return state

    def _stop(self, state: RowState) -> None:
        """The request left the batch: its shadows end as matched so far, no miss seen (their
        positions are in the pooled rates already; this closes them in the trace)."""
        for source, shadow in state.shadows.items():
            self._learn(state, source, shadow, shadow.matched, 0, shadow.matched)
        state.shadows = {}
        self._finder.stop(state)

    def _score(self, state: RowState, new: Sequence[int]) -> None:
        """Learn from last cycle's candidates against the tokens that came: a drafted one at
        once (the engine verified it), an undrafted one ("shadow") followed over the row's next
        cycles until it misses or ends (`policy.follow`), one shadow per source at a time, each
        position counted in the pooled rates as soon as its token came."""
        for source, shadow in list(state.shadows.items()):
            if self._follow(state, source, shadow, new):
                del state.shadows[source]
        for source, candidate in state.candidates.items():
            if source == "suffix":  # the suffix tree's backoff goes by the first token
                self._finder.suffix_scored(state, self.control.cycle,
                                           hit=bool(new) and candidate.tokens[0] == new[0])
            if candidate.drafted:
                hits, misses = outcome(candidate.tokens, new)
                self.calibration.observe(source, candidate.predicted,
                                         min(len(new) - 1, candidate.drafted))
                candidate.expected = self.pooled.observe(
                    (source, candidate.band, candidate.full), hits, misses)
                self._learn(state, source, candidate, hits, misses, len(new))
            elif source not in state.shadows and not self._follow(state, source, candidate,
                                                                  new):
                state.shadows[source] = candidate
        state.candidates = {}

    def _follow(self, state: RowState, source: str, shadow: Candidate,
                new: Sequence[int]) -> bool:
        """Compare a shadow's next positions with `new`, count them; True once it resolved."""
        before = shadow.matched
        shadow.matched, missed = follow(shadow.tokens, before, new)
        if shadow.matched > before or missed:
            shadow.expected += self.pooled.observe((source, shadow.band, shadow.full),
                                                   shadow.matched, int(missed), start=before)
        if missed or shadow.matched >= len(shadow.tokens):
            self._learn(state, source, shadow, shadow.matched, int(missed),
                        shadow.matched + int(missed))
            return True
        return False

    def _learn(self, state: RowState, source: str, candidate: Candidate, hits: int,
               misses: int, observed: int) -> None:
        """A candidate's whole outcome (its positions are in the pooled rates already) into the
        row's evidence and the trace."""
        if not (hits or misses):
            return
        state.evidence.observe(source, hits, candidate.expected, full=not misses)
        if self._trace is not None:
            self._trace.write(self.control.cycle, self._rows_now, state.uid, source, candidate,
                              hits, misses, observed)

    def _time_cycle(self, now: float, rows: int, accepted: int, clean: bool) -> None:
        """Feed the time since the last call to the cost table, when it was one decode cycle of
        the same rows, and tell the controller what a drafting cycle realised."""
        last, self._last = self._last, None
        if last is None or not clean or rows != last[1]:
            return  # a prefill ran in that step, or the batch changed shape: not a clean sample
        start, _, drafted, baseline = last
        gap = now - start
        if baseline is not None and gap > IDLE_FACTOR * baseline * (1 + drafted / max(rows, 1)):
            return  # the engine sat idle between calls
        self.cost.observe(rows, drafted, gap)
        self.stats["steps_timed"] += 1
        if drafted and baseline:
            self.control.drafted_cycle(((rows + accepted) / gap) / (rows / baseline))

def _probed(state: RowState | None) -> bool:
    return state is not None and state.probed


"""The plugin's own draft-free proposer, loaded by vLLM's `custom_class` speculative method.

    speculative_config={"method": "custom_class",
                        "model": "vllm_specdec_plugin.adaptive.AdaptiveProposer",
                        "num_speculative_tokens": 16}

vLLM (0.32 and 0.33, V1 model runner) builds `AdaptiveProposer(vllm_config)` in the worker, calls
`load_model(model)` (CPU runner) and, after each step's bookkeeping,
`propose(sampled_token_ids, num_tokens_no_spec, token_ids_cpu, slot_mappings=...)`, expecting one
draft list per batch row ([] = no draft). Each call (a "cycle"):

1. matches rows to requests (`rows.RowTracker`: by vLLM's request ids) and scores last cycle's
   candidates against the tokens that came (`learning.AcceptanceLearner`): a drafted one at
   once, an undrafted one followed over the row's next cycles to its first miss, so every draft
   position is observed whether or not the row drafts;
2. times the cycle since the last call (the proposer's own time included) into the step-cost
   table (`timing.CycleTimer`, `core/step_cost.py`), when it was a clean decode cycle;
3. finds candidates for the rows it looks at (all rows when awake, a rotating share when dormant,
   `control.py`): vLLM's own n-gram matcher over prompt + output, and arctic_inference's suffix
   tree (when installed) only where the n-gram candidate is missing or short plus a rotating
   sample of rows, its tree brought up to date lazily from the token array;
4. values each row's best candidate by the acceptance model and drafts the tokens that raise
   expected tokens per second by more than the controller's margin (`policy.plan_draft_lengths`).

The class only wires these together over the state objects (`state.py`); its tunables are
`params` (`params.AdaptiveParams`), its counters `stats` (`stats.ProposerStats`).

Any internal error drafts nothing for that cycle and is logged once: the engine never sees it.
`VLLM_SPECDEC_ADAPTIVE_STATS` names a JSON file for its counters (cost per row per cycle, awake
and dormant, overall and by batch size; the cost table, the calibration);
`VLLM_SPECDEC_ADAPTIVE_TRACE` a JSON-lines file of scored candidates for replaying the
acceptance model (`trace.py`); one worker writes each (`stats.worker_paths`).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from vllm_specdec_plugin.core.methods import ADAPTIVE_CLASS_PATH
from vllm_specdec_plugin.core.settings import ENV_ADAPTIVE_STATS, ENV_ADAPTIVE_TRACE
from vllm_specdec_plugin.core.step_cost import StepCostTable
from vllm_specdec_plugin.proposer.candidates import CandidateFinder
from vllm_specdec_plugin.proposer.control import DraftController
from vllm_specdec_plugin.proposer.learning import AcceptanceLearner
from vllm_specdec_plugin.proposer.params import ADAPTIVE_PARAMS, AdaptiveParams
from vllm_specdec_plugin.proposer.policy import plan_draft_lengths
from vllm_specdec_plugin.proposer.rows import RowTracker
from vllm_specdec_plugin.proposer.state import RequestLimits, RowState
from vllm_specdec_plugin.proposer.stats import (
    CostByBatch,
    ProposerStats,
    StatsFile,
    worker_paths,
)
from vllm_specdec_plugin.proposer.timing import CycleTimer
from vllm_specdec_plugin.proposer.trace import TraceWriter

CLASS_PATH = ADAPTIVE_CLASS_PATH


class AdaptiveProposer:
    """Draft-free proposer that reads acceptance and load (see the module docstring)."""

    params: AdaptiveParams = ADAPTIVE_PARAMS
    """The tunables; vLLM builds the class with its config only, so a subclass (or a test) sets
    other values here."""

    def __init__(self, vllm_config: Any) -> None:
        p = self.params
        spec = vllm_config.speculative_config
        self.k = int(spec.num_speculative_tokens or p.default_num_speculative_tokens)
        self.max_model_len = int(vllm_config.model_config.max_model_len)
        max_rows = int(vllm_config.scheduler_config.max_num_seqs)
        from vllm.logger import init_logger

        self._logger = init_logger("vllm.specdec_plugin.adaptive")
        self._finder = CandidateFinder(max_rows, self.k, self.max_model_len, params=p)
        self._max_rows = max_rows
        self.stats = ProposerStats()
        self.tracker = RowTracker(max_rows, self.stats, self._stop, p)
        stats_path, trace_path = worker_paths(os.environ.get(ENV_ADAPTIVE_STATS),
                                              os.environ.get(ENV_ADAPTIVE_TRACE))
        self.learner = AcceptanceLearner(
            p, TraceWriter.open(trace_path, self._logger, p.max_trace_records))
        self.cost = StepCostTable(p.step_cost)
        self.control = DraftController(p)
        self.timer = CycleTimer(self.cost, self.control, self.stats, p.idle_factor)
        self.cost_by_batch = CostByBatch()
        self._rows_now = 0
        self._failed = False
        self._stats_file = None if not stats_path else StatsFile(
            stats_path, self._stats_document, self._logger, p.stats_every, p.stats_idle_s)

    clock: Callable[[], float] = staticmethod(lambda: time.perf_counter())
    """Where a cycle's time is read (`timing.CycleTimer` learns step costs from it):
    `time.perf_counter`, looked up at each call; `whatif`'s replay gives an instance a
    simulated clock that advances by each step's modelled time."""

    wants_request_limits = True
    """Asks vLLM's model runner for its requests
    (`engine/changes/worker_gpu_model_runner.py`)."""
    request_limits: RequestLimits | None = None
    """(request id by batch row, the runner's request states by id), set by the runner before
    each call: which request each row holds (`rows.RowTracker.match`) and where it stops (vLLM
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
        start = self.clock()
        dormant = self.control.dormant
        try:
            drafts = self._propose(start, sampled_token_ids, num_tokens_no_spec, token_ids_cpu)
        except Exception:
            self.stats.errors += 1
            if not self._failed:
                self._failed = True
                self._logger.exception("adaptive proposer failed; drafting nothing this step "
                                       "(logged once)")
            self._reset()
            drafts = [[] for _ in sampled_token_ids]
        spent = self.clock() - start
        rows = len(sampled_token_ids)
        self.stats.called(dormant, rows, spent)
        self.cost_by_batch.add("dormant" if dormant else "awake", rows, spent)
        return drafts

    def _stats_document(self) -> tuple[dict[str, float], dict[str, Any]]:
        calibration = self.learner.calibration
        return self.stats.as_dict(), {
            "cost_table": self.cost.summary(), "pooled": self.learner.pooled.table(),
            "cost_by_batch": self.cost_by_batch.summary(),
            "calibration": {s: calibration.factor(s) for s in calibration.predicted},
            "margin": self.control.margin, "dormant": self.control.dormant,
            **self.control.counters, "events": list(self.control.events),
            "request_cycles": list(self.tracker.request_cycles),
            "suffix": self._finder.suffix is not None,
            "suffix_calls": self._finder.suffix_calls}

    def _reset(self) -> None:
        """Forget every row (after an internal error): all requests start afresh."""
        self.tracker.reset()
        self.timer.reset()
        self._finder.reset()

    def _stop(self, state: RowState) -> None:
        """The request left the batch: its shadows closed, its suffix tree ended."""
        self.learner.close(state, self.control.cycle, self._rows_now)
        self._finder.stop(state)

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
        self.timer.observe(now, rows, accepted, clean=not fresh and bool(lens.all()))
        decoding = [i for i in range(rows) if states[i] is not None
                    and counts[i] < self.max_model_len - 1]
        looked = [i for i in decoding if self.control.probes(i) or not _probed(states[i])]
        # vLLM's own int32 counts: the numba matcher was compiled for them (an int64 copy
        # would compile a second specialisation inside the engine, ~1 s)
        candidates = self._finder.find(looked, states, num_tokens, token_ids, self.control.cycle,
                                       dormant=self.control.dormant)
        self.stats.probed_rows += len(looked)
        factors = self.learner.factors()
        values: list[list[float]] = []
        chosen: list[tuple[int, str | None]] = []
        for i in looked:
            state = states[i]
            assert state is not None
            # a step emits up to drafted + 1 tokens: draft none past the request's last token
            room = max(min(self.max_model_len, state.end) - 1 - int(counts[i]), 0)
            best, best_values = self.learner.values(candidates[i], state.evidence,
                                                    min(self.k, room), factors)
            values.append(best_values)
            chosen.append((i, best))
        wants_baseline = self.cost.wants_baseline(rows)
        lengths = [0] * len(values) if wants_baseline else plan_draft_lengths(
            values, rows, lambda d: self.cost.seconds(rows, d), self.control.margin)
        self.stats.baseline_cycles += int(wants_baseline and any(values))
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
            drafts[i] = state.draft = self.learner.sent(candidates[i][picked], length,
                                                        row_values, factors[picked])
            drafted += length
        self.control.requests = self.stats.requests
        self.control.planned(drafted)
        self.tracker.store(states, counts, token_ids, keys)
        self.timer.planned(now, rows, drafted)
        self.stats.draft_tokens += drafted
        return drafts

    def _match_rows(self, sampled: list[list[int]], lens: np.ndarray, counts: np.ndarray,
                    token_ids: np.ndarray
                    ) -> tuple[list[RowState | None], np.ndarray | None, int, bool]:
        """Each row's state (`RowTracker.match`: by vLLM's request id where the runner gives
        it), the rows' keys, the drafted tokens accepted, and whether any row is new; last
        cycle's candidates scored against the tokens that came (the suffix tree's backoff,
        then the acceptance model's learning)."""
        cycle = self.control.cycle
        states, keys, fresh = self.tracker.match(sampled, lens, counts, token_ids,
                                              self.request_limits, cycle)
        accepted = 0
        for i, state in enumerate(states):
            if state is None:
                continue
            if state.draft:
                accepted += len(sampled[i]) - 1
            if state.candidates or state.shadows:
                self._finder.scored(state, sampled[i], cycle)
                self.learner.score(state, sampled[i], cycle, len(sampled))
        self.stats.accepted_tokens += accepted
        return states, keys, accepted, fresh


def _probed(state: RowState | None) -> bool:
    return state is not None and state.probed

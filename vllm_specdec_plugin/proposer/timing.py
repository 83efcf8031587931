"""The adaptive proposer's clock: each clean decode cycle's time into the step-cost table.

A cycle's time is the gap from the start of one `propose` call to the start of the next: the
proposer's own time plus the engine step that verified what it proposed. Only a clean cycle is
a sample (`core/step_cost.py`): the same rows as the last call, no new request and no row that
sampled nothing (a prefill ran in that step otherwise), and not a gap longer than
`AdaptiveParams.idle_factor` predicted cycles (the engine sat idle between calls). A timed cycle
that drafted also tells the controller (`control.py`) the speedup it realised.
"""

from __future__ import annotations

from vllm_specdec_plugin.core.step_cost import StepCostTable
from vllm_specdec_plugin.proposer.control import DraftController
from vllm_specdec_plugin.proposer.stats import ProposerStats


class CycleTimer:
    """Times the proposer's cycles (see the module docstring)."""

    def __init__(self, cost: StepCostTable, control: DraftController, stats: ProposerStats,
                 idle_factor: float) -> None:
        self.cost, self.control, self.stats = cost, control, stats
        self.idle_factor = idle_factor
        self._last: tuple[float, int, int, float | None] | None = None
        """(start, rows, drafted, baseline seconds) of the last cycle."""

    def observe(self, now: float, rows: int, accepted: int, clean: bool) -> None:
        """A call started at `now`: feed the time since the last call to the cost table, when
        it was one decode cycle of the same rows, and tell the controller what a drafting cycle
        realised (`accepted` drafted tokens)."""
        last, self._last = self._last, None
        if last is None or not clean or rows != last[1]:
            return  # a prefill ran in that step, or the batch changed shape: not a clean sample
        start, _, drafted, baseline = last
        gap = now - start
        if (baseline is not None
                and gap > self.idle_factor * baseline * (1 + drafted / max(rows, 1))):
            return  # the engine sat idle between calls
        self.cost.observe(rows, drafted, gap)
        self.stats.steps_timed += 1
        if drafted and baseline:
            self.control.drafted_cycle(((rows + accepted) / gap) / (rows / baseline))

    def planned(self, now: float, rows: int, drafted: int) -> None:
        """The call started at `now` drafted `drafted` tokens for `rows` rows."""
        self._last = (now, rows, drafted, self.cost.baseline(rows))

    def reset(self) -> None:
        """Forget the last cycle (after an internal error): the next one is not timed."""
        self._last = None

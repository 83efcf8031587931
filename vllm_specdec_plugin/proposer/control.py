"""When the adaptive proposer drafts at all: a margin controller and a dormant mode.

Pure Python, no vLLM. Two feedback loops on what drafting actually bought:

- **Margin.** After every timed cycle that drafted, the realised speedup is its tokens per
  second over the no-draft baseline's (`rows / baseline(rows)`). A moving average of its log
  raises the plan's required margin when drafting steps realise less than 1x and lowers it
  when they pay by more than `pays`: costs the model never sees (or misjudges) are charged
  back to the decision, in either direction.
- **Dormant mode.** When drafting has stopped paying (the plan drafted nothing for
  `dormant_after` awake cycles in a row, or the margin sits at its ceiling while drafting
  still loses), the proposer goes dormant: each cycle it finds and scores candidates only for
  a rotating `1 / probe_every` of the rows (plus every new request once), which keeps the
  acceptance statistics alive at a fraction of the cost. It wakes as soon as the plan over
  the probed rows would draft, and at the latest after `wake_every` dormant cycles (with the
  margin halved), so dormancy is never a one-way switch.

The names in backquotes are fields of `params.AdaptiveParams`.
"""

from __future__ import annotations

import math
from typing import Any

from vllm_specdec_plugin.proposer.params import ADAPTIVE_PARAMS, AdaptiveParams


class DraftController:
    """The margin, the dormant flag and their history (see the module docstring)."""

    def __init__(self, params: AdaptiveParams = ADAPTIVE_PARAMS) -> None:
        self.params = params
        self.margin = params.margin_start
        self.dormant = False
        self.log_speedup = 0.0
        self._idle = 0
        self._dormant_cycles = 0
        self.cycle = 0
        self.requests = 0
        """Requests the proposer had seen (set by it; recorded with each event)."""
        self.counters: dict[str, int] = {"dormant_entries": 0, "dormant_exits": 0,
                                         "dormant_cycles": 0, "awake_cycles": 0}
        self.events: list[dict[str, Any]] = []

    def probes(self, row: int) -> bool:
        """Whether a dormant proposer looks at `row` this cycle (all rows when awake)."""
        return not self.dormant or (row + self.cycle) % self.params.probe_every == 0

    def drafted_cycle(self, speedup: float) -> None:
        """A timed cycle that drafted realised `speedup` x the no-draft baseline's rate."""
        if speedup <= 0.0:
            return
        p = self.params
        self.log_speedup += p.speedup_weight * (math.log(speedup) - self.log_speedup)
        low, high = p.margin_range
        if self.log_speedup < 0.0:
            self.margin = min(high, self.margin + p.margin_up)
        elif self.log_speedup > p.pays:
            self.margin = max(low, self.margin - p.margin_down)

    def planned(self, drafted: int) -> None:
        """End of a cycle in which `drafted` tokens were planned."""
        self.cycle += 1
        p = self.params
        if self.dormant:
            self.counters["dormant_cycles"] += 1
            self._dormant_cycles += 1
            if drafted:
                self._wake("probed rows would draft")
            elif self._dormant_cycles >= p.wake_every:
                self.margin = max(p.margin_range[0], self.margin / 2)
                self._wake("periodic re-probe")
            return
        self.counters["awake_cycles"] += 1
        self._idle = 0 if drafted else self._idle + 1
        if self._idle >= p.dormant_after:
            self._sleep(f"nothing drafted for {p.dormant_after} cycles")
        elif (self.margin >= p.margin_range[1] and self.log_speedup < 0.0 and drafted):
            self._sleep("drafting loses at the highest margin")

    def _sleep(self, why: str) -> None:
        self.dormant, self._dormant_cycles = True, 0
        self.counters["dormant_entries"] += 1
        self._event("dormant", why)

    def _wake(self, why: str) -> None:
        self.dormant, self._idle = False, 0
        self.counters["dormant_exits"] += 1
        self._event("awake", why)

    def _event(self, state: str, why: str) -> None:
        if len(self.events) < self.params.max_events:
            self.events.append({"cycle": self.cycle, "requests": self.requests,
                                "state": state, "why": why})

"""When the adaptive proposer drafts at all: a margin controller and a dormant mode.

Pure Python, no vLLM. Two feedback loops on what drafting actually bought:

- **Margin.** After every timed cycle that drafted, the realised speedup is its tokens per
  second over the no-draft baseline's (`rows / baseline(rows)`). A moving average of its log
  raises the plan's required margin when drafting steps realise less than 1x and lowers it
  when they pay by more than `PAYS`: costs the model never sees (or misjudges) are charged
  back to the decision, in either direction.
- **Dormant mode.** When drafting has stopped paying (the plan drafted nothing for
  `DORMANT_AFTER` awake cycles in a row, or the margin sits at its ceiling while drafting
  still loses), the proposer goes dormant: each cycle it finds and scores candidates only for
  a rotating `1 / PROBE_EVERY` of the rows (plus every new request once), which keeps the
  acceptance statistics alive at a fraction of the cost. It wakes as soon as the plan over
  the probed rows would draft, and at the latest after `WAKE_EVERY` dormant cycles (with the
  margin halved), so dormancy is never a one-way switch.
"""

from __future__ import annotations

import math
from typing import Any

MARGIN_START = 0.05
MARGIN_RANGE = (0.02, 0.5)
MARGIN_UP = 0.03  # per losing drafting cycle
MARGIN_DOWN = 0.01  # per paying drafting cycle
PAYS = math.log(1.03)
SPEEDUP_WEIGHT = 0.2  # moving-average weight of one drafting cycle's log speedup
DORMANT_AFTER = 32
PROBE_EVERY = 8
WAKE_EVERY = 256
MAX_EVENTS = 64


class DraftController:
    """The margin, the dormant flag and their history (see the module docstring)."""

    def __init__(self) -> None:
        self.margin = MARGIN_START
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
        return not self.dormant or (row + self.cycle) % PROBE_EVERY == 0

    def drafted_cycle(self, speedup: float) -> None:
        """A timed cycle that drafted realised `speedup` x the no-draft baseline's rate."""
        if speedup <= 0.0:
            return
        self.log_speedup += SPEEDUP_WEIGHT * (math.log(speedup) - self.log_speedup)
        low, high = MARGIN_RANGE
        if self.log_speedup < 0.0:
            self.margin = min(high, self.margin + MARGIN_UP)
        elif self.log_speedup > PAYS:
            self.margin = max(low, self.margin - MARGIN_DOWN)

    def planned(self, drafted: int) -> None:
        """End of a cycle in which `drafted` tokens were planned."""
        self.cycle += 1
        if self.dormant:
            self.counters["dormant_cycles"] += 1
            self._dormant_cycles += 1
            if drafted:
                self._wake("probed rows would draft")
            elif self._dormant_cycles >= WAKE_EVERY:
                self.margin = max(MARGIN_RANGE[0], self.margin / 2)
                self._wake("periodic re-probe")
            return
        self.counters["awake_cycles"] += 1
        self._idle = 0 if drafted else self._idle + 1
        if self._idle >= DORMANT_AFTER:
            self._sleep(f"nothing drafted for {DORMANT_AFTER} cycles")
        elif (self.margin >= MARGIN_RANGE[1] and self.log_speedup < 0.0 and drafted):
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
        if len(self.events) < MAX_EVENTS:
            self.events.append({"cycle": self.cycle, "requests": self.requests,
                                "state": state, "why": why})

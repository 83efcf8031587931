"""The schedule controller's state (`core/schedule_control.py`): one engine step as the scheduler
saw it, the block in progress in a bucket, and a bucket's arms and history. Plain data."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

from vllm_specdec_plugin.core.arm_stats import ArmEstimate, BatchShape

HISTORY_MAX = 64


class Step(NamedTuple):
    """One engine step, as the scheduler saw it (a tuple: one is made per step, cheaply).

    `batch`: requests scheduled (the lookup's index); `k`: the k the lookup gave the step
    (`num_spec_tokens_to_schedule`); `seconds`: one whole engine cycle, from the end
    of the previous `update_from_output()` to the end of this one (from this step's
    `schedule()` after an idle gap); `tokens`: output tokens the step produced (one per
    request plus the accepted drafts); `drafted`: draft tokens it verified; `clean`: decode
    only, no prefill chunk in it."""

    batch: int
    k: int
    seconds: float
    tokens: int
    drafted: int
    clean: bool = True


class Block:
    """The block in progress in one bucket: its k, sums over its settled steps, its arm's
    step-time envelope, a stall seen, when it ends. Slots: it is updated on every step."""

    __slots__ = ("arm", "steps", "yields", "time", "rows", "seconds", "drafted", "low",
                 "stalled", "target", "cap")

    def __init__(self, arm: int, low: float, target: float, cap: int) -> None:
        self.arm, self.low, self.target, self.cap = arm, low, target, cap
        self.steps = self.rows = self.drafted = self.stalled = 0
        self.yields = self.time = self.seconds = 0.0


Measure = tuple[float, float, float]  # a closed block: sum of yield per row, time, row-steps


@dataclass
class BucketState:
    """One batch-size bucket: its incumbent k, its arms and the block running now."""

    key: int
    prior: int
    incumbent: int
    arms: dict[int, ArmEstimate]
    block: Block
    shape: BatchShape
    last_incumbent: Measure | None = None
    pending: tuple[int, Measure, Measure] | None = None
    """An exploration block waiting for its next neighbour: (k, it, the neighbour before)."""
    step_time: float = 0.0
    """The incumbent's mean step time in incumbent-step equivalents (0: not measured yet)."""
    last_seen: int = 0
    switches: int = 0
    steps: int = 0
    stalls: int = 0
    """Steps left out as stalls (`ControllerParams.outlier`)."""
    slowest_low: float = 0.0
    """The highest arm envelope: one stall threshold for every arm (see `outlier`)."""
    explore_steps: int = 0
    unpaired: int = 0
    """Explorations dropped unpaired when the bucket went stale (`_unpaired`)."""
    turn: list[int] = field(default_factory=list)
    decision: tuple[int, int] | None = None
    """(old, new) incumbent of the bucket's last switch of its own; None: none yet."""
    history: list[tuple[int, int]] = field(default_factory=list)
    """(the bucket's measured steps then, the new incumbent) per switch, `HISTORY_MAX` first."""

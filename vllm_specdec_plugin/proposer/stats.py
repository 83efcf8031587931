"""The adaptive proposer's statistics (`ProposerStats`, `CostByBatch`), their file
(VLLM_SPECDEC_ADAPTIVE_STATS), and which worker writes the proposer's files.

One writer per path: under tensor parallelism every rank builds the proposer and runs it on the
same batch, so only tensor-parallel rank 0 writes (the others would write the same numbers);
other data-parallel engines or pipeline stages see other requests, so their tensor-parallel rank
0 writes `PATH.rank<world rank>` (`worker_paths`). A file is written to a new temporary file
in the target's directory (`tempfile.mkstemp`: a fresh name, never an existing file or link)
and renamed over the target (`os.replace` replaces a link there, never writes through it).
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from vllm_specdec_plugin.core.step_cost import bucket, bucket_bounds

FILE_MODE = 0o644


@dataclass
class ProposerStats:
    """The proposer's counters: the statistics file's first keys, in this order (`as_dict`;
    tests, `vllm-specdec status` and the docs read them by name)."""

    calls: int = 0
    """Calls of `propose`."""
    rows: int = 0
    """Batch rows over all calls."""
    overhead_s: float = 0.0
    """The proposer's own seconds over all calls."""
    requests: int = 0
    """Requests started (`rows.RowTracker`)."""
    draft_tokens: int = 0
    """Tokens drafted."""
    accepted_tokens: int = 0
    """Drafted tokens the engine accepted."""
    steps_timed: int = 0
    """Clean decode cycles fed to the step-cost table."""
    errors: int = 0
    """Calls that failed inside and drafted nothing."""
    awake_rows: int = 0
    """Batch rows of the calls made awake."""
    awake_overhead_s: float = 0.0
    """The proposer's own seconds in the calls made awake."""
    dormant_rows: int = 0
    """Batch rows of the calls made dormant."""
    dormant_overhead_s: float = 0.0
    """The proposer's own seconds in the calls made dormant."""
    probed_rows: int = 0
    """Rows whose candidates were looked for."""
    baseline_cycles: int = 0
    """Cycles that drafted nothing to measure the no-draft baseline, though rows had drafts."""
    limited_requests: int = 0
    """Requests whose end (prompt + max_tokens) the runner gave."""

    def called(self, dormant: bool, rows: int, seconds: float) -> None:
        """One call of `rows` rows took the proposer `seconds`, made dormant or awake."""
        self.calls += 1
        self.rows += rows
        self.overhead_s += seconds
        if dormant:
            self.dormant_rows += rows
            self.dormant_overhead_s += seconds
        else:
            self.awake_rows += rows
            self.awake_overhead_s += seconds

    def as_dict(self) -> dict[str, float]:
        """The counters by name, in the statistics file's order."""
        return asdict(self)


def worker_ranks() -> tuple[int, int]:
    """(tensor-parallel rank, world rank) of this worker, from vLLM's process groups; 0 for a
    group vLLM has not initialised (a single process)."""
    from vllm.distributed import parallel_state

    tp = world = 0
    with contextlib.suppress(AssertionError):  # vLLM asserts a group is initialised
        if parallel_state.model_parallel_is_initialized():
            tp = parallel_state.get_tensor_model_parallel_rank()
    with contextlib.suppress(AssertionError):
        world = parallel_state.get_world_group().rank_in_group
    return tp, world


def for_this_worker(path: str | None, ranks: tuple[int, int]) -> str | None:
    """The path this worker writes for a configured `path` (None: it writes nothing)."""
    tp, world = ranks
    if not path or tp != 0:
        return None
    return path if world == 0 else f"{path}.rank{world}"


def worker_paths(*paths: str | None) -> list[str | None]:
    """The paths this worker writes for the configured `paths` (`for_this_worker`); vLLM's
    groups are read only when a path is configured."""
    if not any(paths):
        return [None] * len(paths)
    ranks = worker_ranks()
    return [for_this_worker(path, ranks) for path in paths]


def write_atomically(path: str, text: str) -> None:
    """`text` into `path` through a new temporary file in the same directory, renamed over it."""
    directory, name = os.path.split(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=directory)
    try:
        os.fchmod(fd, FILE_MODE)
        with os.fdopen(fd, "w") as out:
            out.write(text)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def per_row_us(stats: Mapping[str, float], mode: str = "") -> float | None:
    """The proposer's own microseconds per batch row per call (all calls, or one mode's)."""
    prefix = f"{mode}_" if mode else ""
    rows = stats.get(f"{prefix}rows", 0.0)
    return 1e6 * stats[f"{prefix}overhead_s"] / rows if rows else None


def batch_label(rows: int) -> str:
    """The batch-size bucket a call's cost is kept under (`step_cost.bucket`'s buckets): "1",
    "2-3", "4-7", ... (the statistics file's labels: "1", not `bucket_label`'s "1-1")."""
    low, high = bucket_bounds(bucket(rows))
    return "1" if low == 1 else f"{low}-{high}"


class CostByBatch:
    """The proposer's own time per call, by mode (awake, dormant) and batch-size bucket: what
    it costs per row at each load, measured in the engine."""

    def __init__(self) -> None:
        self._cells: dict[tuple[str, int], list[float]] = {}
        """(mode, `step_cost.bucket`) -> [calls, rows, seconds]."""

    def add(self, mode: str, rows: int, seconds: float) -> None:
        cell = self._cells.setdefault((mode, bucket(rows)), [0, 0, 0.0])
        cell[0] += 1
        cell[1] += rows
        cell[2] += seconds

    def summary(self) -> dict[str, dict[str, dict[str, float]]]:
        """mode -> batch bucket -> calls, µs per call and µs per row."""
        out: dict[str, dict[str, dict[str, float]]] = {}
        for (mode, key), (calls, rows, seconds) in sorted(self._cells.items()):
            out.setdefault(mode, {})[batch_label(bucket_bounds(key)[0])] = {
                "calls": calls, "us_per_call": round(1e6 * seconds / calls, 1),
                "us_per_row": round(1e6 * seconds / rows, 1)}
        return out


def write_stats(path: str, stats: Mapping[str, float], state: Mapping[str, Any],
                logger: Any) -> None:
    """The counters, the cost per row (overall, awake, dormant) and the policy's state."""
    document = {**stats,
                "us_per_row": per_row_us(stats),
                "us_per_row_awake": per_row_us(stats, "awake"),
                "us_per_row_dormant": per_row_us(stats, "dormant"),
                **state}
    try:
        write_atomically(path, json.dumps(document))
    except OSError as exc:
        logger.debug("adaptive proposer stats not written: %s", exc)


class StatsFile:
    """Keeps the statistics file current: written every `every` calls and when a new request
    came, and once more when the engine has gone `idle_s` without a call, by a daemon thread,
    or at interpreter exit, so the file ends with the run's last cycle, not up to `every` calls
    before it (an engine in the caller's own process may exit within `idle_s` of its last
    step).

    The proposer runs each call holding `lock`, which the idle writer takes too: the writer
    never reads the proposer's state while a call changes it.
    """

    def __init__(self, path: str, document: Callable[[], tuple[Mapping[str, float],
                                                                Mapping[str, Any]]],
                 logger: Any, every: int, idle_s: float) -> None:
        self.path, self._document, self._logger = path, document, logger
        self._every, self._idle_s = every, idle_s
        self.lock = threading.Lock()
        self._requests_written = 0.0
        self._dirty = False
        self._last_call = time.monotonic()
        threading.Thread(target=self._idle_writer, name="specdec-adaptive-stats",
                         daemon=True).start()
        atexit.register(self._write_if_dirty, timeout=1.0)

    def called(self, stats: ProposerStats) -> None:
        """End of a call (holding `lock`), with the proposer's counters: write now if due, else
        mark the file stale."""
        self._last_call = time.monotonic()
        self._dirty = True
        if stats.requests != self._requests_written or stats.calls % self._every == 0:
            self._write()

    def _write(self) -> None:
        self._dirty = False
        stats, state = self._document()
        self._requests_written = stats["requests"]
        write_stats(self.path, stats, state, self._logger)

    def _idle_writer(self) -> None:
        while True:
            time.sleep(self._idle_s)
            with self.lock:
                if self._dirty and time.monotonic() - self._last_call >= self._idle_s:
                    self._write()

    def _write_if_dirty(self, timeout: float) -> None:
        """At exit: the last write, unless a call still holds the lock after `timeout`."""
        if self.lock.acquire(timeout=timeout):
            try:
                if self._dirty:
                    self._write()
            finally:
                self.lock.release()

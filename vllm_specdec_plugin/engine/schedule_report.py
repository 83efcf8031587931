"""The schedule controller's state, from the engine core to `/metrics`.

The controller runs in vLLM's engine-core process; `/metrics` is served by the API server
process. The engine core writes `snapshot()` as JSON to a file the hook chose, atomically, from a
thread of its own (`SnapshotWriter`: at most every 5 s, and at once when a batch bucket is seen
for the first time), never on the engine's step path; the API server's Prometheus
registry holds a `ScheduleCollector` that reads that file at each scrape (bounded: the project's
JSON reader) and yields

- `vllm_specdec_schedule_k{batch_bucket}`: the k in force per batch bucket ("1-1", "2-3", ...);
- `vllm_specdec_schedule_gain{batch_bucket,k}`: the measured tokens/s of k against k=0 in that
  bucket, with `..._gain_low` / `..._gain_high` (its 90% interval) and `..._gain_pairs` (the
  paired blocks behind it) beside it;
- `vllm_specdec_schedule_overhead_us_per_step`: the controller's own time per step;
- `vllm_specdec_step_cost_seconds{batch_bucket,part}` (part `no_draft`, `switch`, `per_token`)
  and `vllm_specdec_step_cost_rows{batch_bucket}`: the step costs the controller learned (the
  snapshot's `step_costs`, what `summary()` of `core/step_cost.StepCostTable` gives), exactly
  what a `StepCostCurve` needs.

`vllm-specdec status` reads them back (`cli/`); `status --json` carries the step costs in the
form `vllm-specdec whatif --costs` reads (`cli/status_figures.step_costs_of`).
"""

from __future__ import annotations

import json
import logging
import math
import os
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from vllm_specdec_plugin.core.limits import ascii_decimal
from vllm_specdec_plugin.core.schedule_control import ScheduleController
from vllm_specdec_plugin.core.step_cost import bucket, bucket_label
from vllm_specdec_plugin.core.switchback import Switchback
from vllm_specdec_plugin.inputs.vllm_metrics import SCHEDULE_GAIN as GAIN_METRIC
from vllm_specdec_plugin.inputs.vllm_metrics import SCHEDULE_K as K_METRIC
from vllm_specdec_plugin.inputs.vllm_metrics import SCHEDULE_OVERHEAD as OVERHEAD_METRIC
from vllm_specdec_plugin.inputs.vllm_metrics import STEP_COST, STEP_COST_PARTS, STEP_COST_ROWS
from vllm_specdec_plugin.proposer.stats import write_atomically

SNAPSHOT_MAX_BYTES = 1 << 20


def snapshot(controller: ScheduleController, switchback: Switchback | None, own_s: float,
             steps: int, model_name: str = "", report_s: float = 0.0,
             decide_s: float = 0.0) -> dict[str, Any]:
    """The controller's state as plain data (what the file holds). Its cost: the per-step path
    on the engine thread (`overhead_us_per_step`, the gauge), and spread over the steps the
    decision thread's (`decide_us_per_step`) and the snapshot writes (`snapshot_us_per_step`),
    both off the engine thread."""
    buckets = {}
    for key, state in sorted(controller.buckets.items()):
        gains = {}
        for k in controller.k_set:
            found = controller.gain(key, k)
            if found is not None:
                ratio, low, high, pairs = found
                gains[str(k)] = {"ratio": ratio, "low": low if low > 0 else None,
                                 "high": high if math.isfinite(high) else None, "pairs": pairs}
        buckets[bucket_label(key)] = {
            "k": state.incumbent, "prior": state.prior, "block_k": state.block.arm,
            "steps": state.steps, "explore_steps": state.explore_steps,
            "unpaired": state.unpaired, "counted_pairs": state.counted_pairs,
            "stalls": state.stalls, "visit_steps": state.visits,
            "switches": state.switches, "history": state.history, "gain": gains}
    return {"model_name": model_name, "k_set": list(controller.k_set), "buckets": buckets,
            "overhead_us_per_step": 1e6 * own_s / steps if steps else None,
            "snapshot_us_per_step": 1e6 * report_s / steps if steps else None,
            "decide_us_per_step": 1e6 * decide_s / steps if steps else None,
            "steps": steps, "lookup_lag_steps": controller.lag,
            "step_costs": controller.costs.summary(),
            "switchback": switchback.report() if switchback is not None else None}


def read_snapshot(path: str) -> dict[str, Any] | None:
    """The file's snapshot, or None while there is none (or it is not one)."""
    from pathlib import Path

    from vllm_specdec_plugin.inputs.files import read_bounded
    from vllm_specdec_plugin.inputs.parsers import load_json

    try:
        text = read_bounded(Path(path), SNAPSHOT_MAX_BYTES).decode("utf-8")
        found = load_json(text, path, "the engine core rewrites it", SNAPSHOT_MAX_BYTES)
    except Exception:  # absent before the first step, or half a disk: no gauges this scrape
        return None
    return found if isinstance(found, dict) else None


def gauge_samples(data: dict[str, Any]) -> Iterator[tuple[str, dict[str, str], float]]:
    """(metric, labels, value) for every gauge of one snapshot; each carries `model_name`,
    as vLLM's own metrics do."""
    model = data.get("model_name")
    model = model if isinstance(model, str) else ""
    buckets = data.get("buckets")
    for label, cell in (buckets.items() if isinstance(buckets, dict) else ()):
        if not isinstance(cell, dict):
            continue
        if isinstance(cell.get("k"), int):
            yield K_METRIC, {"model_name": model, "batch_bucket": str(label)}, float(cell["k"])
        gains = cell.get("gain")
        for k, gain in (gains.items() if isinstance(gains, dict) else ()):
            if not isinstance(gain, dict):
                continue
            labels = {"model_name": model, "batch_bucket": str(label), "k": str(k)}
            for suffix, field in (("", "ratio"), ("_low", "low"), ("_high", "high"),
                                  ("_pairs", "pairs")):
                value = gain.get(field)
                if isinstance(value, (int, float)):
                    yield GAIN_METRIC + suffix, labels, float(value)
    overhead = data.get("overhead_us_per_step")
    if isinstance(overhead, (int, float)):
        yield OVERHEAD_METRIC, {"model_name": model}, float(overhead)
    yield from _step_cost_samples(data.get("step_costs"), model)


def _step_cost_samples(costs: Any, model: str) -> Iterator[tuple[str, dict[str, str], float]]:
    """The step-cost gauges of the snapshot's `step_costs` (`StepCostTable.summary()`, keyed
    "rows>=N"); a bucket not measured yet (its parts None) yields nothing."""
    for key, cell in (costs.items() if isinstance(costs, dict) else ()):
        prefix, _, number = str(key).partition(">=")
        low = ascii_decimal(number, max_digits=9) if prefix == "rows" else None
        if not low or not isinstance(cell, dict):
            continue
        labels = {"model_name": model, "batch_bucket": bucket_label(bucket(low))}
        values: dict[str, Any] = {part: cell.get(field)
                                  for part, field in STEP_COST_PARTS.items()}
        values["rows"] = cell.get("rows")
        if not all(_number(value) for value in values.values()):
            continue  # no no-draft step measured yet: nothing to price with
        for part, value in values.items():
            if part == "rows":
                yield STEP_COST_ROWS, labels, float(value)
            else:
                yield STEP_COST, {**labels, "part": part}, float(value)


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(
        value)


_HELP = {
    K_METRIC: "Speculative tokens per step the schedule controller keeps per batch bucket",
    GAIN_METRIC: "Measured output tokens/s of k against k=0 per batch bucket (paired blocks)",
    GAIN_METRIC + "_low": "Low end of the 90% interval of vllm_specdec_schedule_gain",
    GAIN_METRIC + "_high": "High end of the 90% interval of vllm_specdec_schedule_gain",
    GAIN_METRIC + "_pairs": "Paired blocks behind vllm_specdec_schedule_gain",
    OVERHEAD_METRIC: "The schedule controller's own microseconds per engine step",
    STEP_COST: "Learned seconds of a decode step per batch bucket: part no_draft (a step that "
               "drafts nothing), switch (a drafting step's extra), per_token (per drafted token)",
    STEP_COST_ROWS: "Batch size the no_draft step cost of vllm_specdec_step_cost_seconds was "
                    "measured at",
}


class ScheduleCollector:
    """A Prometheus collector reading the engine core's snapshot at each scrape."""

    def __init__(self, path: str) -> None:
        self.path = path

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import GaugeMetricFamily

        data = read_snapshot(self.path)
        if data is None:
            return
        families: dict[str, Any] = {}
        for name, labels, value in gauge_samples(data):
            family = families.get(name)
            if family is None:
                family = families[name] = GaugeMetricFamily(name, _HELP[name],
                                                             labels=sorted(labels))
            family.add_metric([labels[key] for key in sorted(labels)], value)
        yield from families.values()

    def describe(self) -> list[Any]:
        return []  # described at collection: the buckets appear as the engine runs


_collector: ScheduleCollector | None = None
_gauges: dict[str, Any] = {}


def publish(data: dict[str, Any]) -> bool:
    """In the engine core, where vLLM serves /metrics from several API servers
    (`PROMETHEUS_MULTIPROC_DIR` set: its registry reads only prometheus_client's shared files,
    never a collector of ours): set the gauges directly, "mostrecent" across processes.
    False where that does not apply (the API server's collector reads the file instead)."""
    if not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        return False
    from prometheus_client import Gauge

    for name, labels, value in gauge_samples(data):
        gauge = _gauges.get(name)
        if gauge is None:
            gauge = _gauges[name] = Gauge(name, _HELP[name], labelnames=sorted(labels),
                                          multiprocess_mode="mostrecent")
        gauge.labels(**labels).set(value)
    return True


def export(path: str) -> None:
    """Register (once per process) the collector for `path`; a later engine's path replaces
    the earlier one's."""
    global _collector
    if _collector is not None:
        _collector.path = path
        return
    from prometheus_client import REGISTRY

    _collector = ScheduleCollector(path)
    REGISTRY.register(_collector)


class SnapshotWriter:
    """Writes the controller's snapshot from a daemon thread of its own, so the engine's step
    path pays one `Event.set()` at most, never the snapshot's intervals, JSON and file write
    (~1.4 ms; on CUDA the engine thread waits on the device meanwhile, with the GIL released).

    `take` builds the snapshot from state the engine thread keeps changing: a read that meets a
    change mid-way (a bucket added while the thread iterates) is taken again, up to `RETRIES`
    times a round; a failure to write (a full disk, a registry clash) stops the writing with one
    WARNING, never the controller or the engine. A round with no new step writes nothing."""

    RETRIES = 3

    def __init__(self, path: str, take: Callable[[], dict[str, Any]],
                 version: Callable[[], int], every_s: float, log: Callable[..., None]) -> None:
        self.path, self.take, self.version, self.every_s, self.log = (path, take, version,
                                                                      every_s, log)
        self.wake = threading.Event()
        self.seconds = 0.0
        """Seconds spent taking and writing snapshots (the thread's, not the engine's)."""
        self.written = -1
        """`version()` at the last write (-1: none yet)."""
        self.stopped = False
        self._thread: threading.Thread | None = None

    def poke(self) -> None:
        """Write soon (from the engine thread; starts the thread on the first call)."""
        if self._thread is None and not self.stopped:
            self._thread = threading.Thread(target=self._run, name="vllm-specdec-snapshot",
                                            daemon=True)
            self._thread.start()
        self.wake.set()

    def _run(self) -> None:
        while not self.stopped:
            self.wake.wait(self.every_s)
            self.wake.clear()
            self.write_once()

    def write_once(self) -> bool:
        """One round: take and write the snapshot if a step came since the last write. False
        once writing has stopped."""
        if self.stopped:
            return False
        version = self.version()
        if version == self.written:
            return True
        started = time.perf_counter()
        try:
            data = self._take()
            if data is not None:
                publish(data)
                write_atomically(self.path, json.dumps(data))
                self.written = version
        except Exception as exc:  # writing must not stop the engine or the controller
            self.log(logging.WARNING, "vllm-specdec-plugin: schedule controller: cannot write "
                     "%s (%s); /metrics will not show its gauges", self.path, exc)
            self.stopped = True
        self.seconds += time.perf_counter() - started
        return not self.stopped

    def _take(self) -> dict[str, Any] | None:
        for attempt in range(self.RETRIES):
            try:
                return self.take()
            except (RuntimeError, ValueError, ArithmeticError):
                # "dictionary changed size during iteration", or a statistic read between two
                # of its fields' updates: the engine thread moved on; read again.
                if attempt == self.RETRIES - 1:
                    raise
        return None

"""Changes to vLLM's scheduler (`vllm.v1.core.sched.scheduler`): the online schedule controller.

`schedule-controller` (shortcut): `Scheduler.schedule` and `Scheduler.update_from_output` are
wrapped so that, on an engine whose speculative config carries the plugin's own load-aware
schedule (the hook says so through `CONTROL_ENV`), each decode step is timed and counted, fed to
`core/schedule_control.ScheduleController` (or, for benchmarks, `core/switchback.Switchback`),
and what it answers is written into `Scheduler.dynamic_sd_lookup`, the dense list vLLM 0.32 and
0.33 read at the end of every `schedule()` to set `num_spec_tokens_to_schedule`. Any other
engine (no schedule, a user's or a tuned preset's schedule, data parallelism: vLLM builds no
lookup) runs vLLM's code untouched after one check per scheduler. The controller's state is
written for `/metrics` (`engine/schedule_report.py`) at most every `REPORT_EVERY_S` (5 s).

A step's time runs from `schedule()` to the end of `update_from_output()`, so idle gaps between
steps never count; a step with a prefill chunk in it is not measured (`Step.clean`), nor one
with a request a client capped (`core_sched_request_caps.py`). The async scheduler
(`AsyncScheduler`) inherits both methods, so it runs the same wrappers; there `schedule(n+1)`
runs before `update_from_output(n)` and a step's window spans about two engine cycles (not yet
timed per cycle: issue 37).
"""

from __future__ import annotations

import functools
import inspect
import json
import logging
import os
import time
from collections import deque
from typing import Any

from vllm_specdec_plugin.core.schedule_control import ScheduleController, Step
from vllm_specdec_plugin.core.step_cost import bucket_bounds
from vllm_specdec_plugin.core.switchback import Switchback, parse_arms
from vllm_specdec_plugin.engine import patching
from vllm_specdec_plugin.engine.changes.core_sched_request_caps import CAPS, capped_in
from vllm_specdec_plugin.engine.patching import Change, apply_patch, prove

MODULE = "vllm.v1.core.sched.scheduler"
CONTROL_ENV = "_VLLM_SPECDEC_SCHEDULE_CONTROL"
"""Set by the engine hook in the process that builds the engine config (and so inherited by the
engine-core process): JSON {"schedule": the plugin's ranges, "switchback": arms or null,
"report": the snapshot file}. Not a user setting."""
_RUNTIME = "_specdec_schedule_runtime"
REPORT_EVERY_S = 5.0
"""The snapshot for /metrics is rewritten at most this often while the engine steps (and at
once when a batch bucket is seen for the first time); Prometheus scrapes every 15-30 s."""


class ControlledScheduler:
    """One scheduler's controller, its step clock and its lookup writer."""

    def __init__(self, scheduler: Any, spec: dict[str, Any]) -> None:
        self.lookup: list[int] = scheduler.dynamic_sd_lookup
        # Where `core_sched_request_caps` keeps the requests a client capped (read per step).
        self.scheduler_state: dict[str, Any] = scheduler.__dict__
        self.prior = list(self.lookup)
        # The values of vLLM's dense lookup (index 0 unused), not of the configured ranges:
        # Model Runner V2 captures decode graphs for exactly these (vLLM 0.33
        # cudagraph_utils: `dense_schedule[1:]`), so no other k may be written.
        self.k_set = tuple(sorted(set(self.lookup[1:])))
        self.graph_tokens = graph_ceiling(getattr(scheduler, "vllm_config", None))
        self.restart(spec.get("switchback"))
        self.report_path: str | None = spec.get("report")
        from vllm_specdec_plugin.core.redact import redact_uri
        from vllm_specdec_plugin.engine.metrics import served_model_name

        self.model_name = redact_uri(served_model_name(getattr(scheduler, "vllm_config", None)))
        self.started: deque[tuple[Any, float]] = deque(maxlen=4)
        self.last_end = 0.0
        """When the previous step's `update_from_output()` ended (0: none yet)."""
        self.busy = False
        """Whether requests were left running then: the engine went straight on to its next
        cycle (post-step draft work included), so that gap is the next step's, not idle."""
        self.own_s = 0.0
        """Seconds in the controller's per-step path (both wrappers), snapshot writes apart."""
        self.report_s = 0.0
        """Seconds writing the snapshot for /metrics (at most every `REPORT_EVERY_S`)."""
        self.steps = 0
        self.reported_buckets = 0
        self.next_report = 0.0

    def restart(self, arms: str | None, fresh: bool = True) -> None:
        """Switchback on `arms` (None: off), and with `fresh` a new controller with the lookup
        back to the prior: for the in-process switchback benchmark, one engine for every cell
        (a warm-up with the controller alone, then its arms, keeping what it learned)."""
        if fresh:
            self.lookup[:] = self.prior
            self.controller = ScheduleController(self.prior, self.k_set,
                                                 max_graph_tokens=self.graph_tokens)
        self.switchback = (Switchback(self.controller, parse_arms(arms, self.k_set))
                           if arms else None)

    def observe(self, output: Any, runner_output: Any, end: float, running: bool) -> None:
        """One step done: time it, count it, feed it, write what the controller answers.

        A step's time is one whole engine cycle: from the end of the previous step's update to
        the end of this one (its schedule, forward pass, update and the post-step draft work in
        between), so the synchronous engine and the asynchronous one (where `schedule(n+1)` runs
        before `update(n)`, vLLM's `step_with_batch_queue`) measure the same thing; after an idle
        gap (nothing was running) it starts at this step's `schedule()`."""
        start = None
        for started, at in self.started:
            if started is output:
                start = at
                break
        batch = len(output.num_scheduled_tokens)
        previous, busy = self.last_end, self.busy
        self.last_end, self.busy = end, running
        if start is None or not batch:
            return
        if busy and previous > 0.0:
            start = previous
        spec_tokens = output.scheduled_spec_decode_tokens
        drafted = sum(map(len, spec_tokens.values())) if spec_tokens else 0
        sampled = runner_output.sampled_token_ids
        tokens = sum(map(len, sampled)) if sampled.__class__ is list else 0
        clean = output.total_num_scheduled_tokens == batch + drafted and tokens >= batch
        if clean and self.scheduler_state.get(CAPS):
            # A row a client capped drafts fewer tokens than the step's k for its own reason:
            # such a step is no evidence about k (docs/operations.md, per-request speculation).
            clean = not capped_in(self.scheduler_state, output.num_scheduled_tokens)
        # tuple.__new__: a Step without the Python-level __new__ a NamedTuple call runs (this is
        # the per-step path; every call counts in a cache-cold engine step).
        step = tuple.__new__(Step, (batch, output.num_spec_tokens_to_schedule, end - start,
                                    tokens, drafted, clean))
        target = self.switchback or self.controller
        change = target.observe(step)
        if change is not None:
            key, k = change
            low, high = bucket_bounds(key)
            high = min(high, len(self.lookup) - 1)
            if low <= high:
                self.lookup[low:high + 1] = [k] * (high - low + 1)
        self.steps += 1
        if self.report_path and (end >= self.next_report
                                 or len(self.controller.buckets) != self.reported_buckets):
            self.next_report = end + REPORT_EVERY_S
            self.reported_buckets = len(self.controller.buckets)
            written = time.perf_counter()
            self.write_report()
            # Counted apart from the per-step path (`report_s`), and both are exported.
            self.report_s += time.perf_counter() - written

    def snapshot(self, switchback: bool = False) -> dict[str, Any]:
        """The state for /metrics; with `switchback`, the switchback's report too (its
        bootstrap intervals cost tens of milliseconds: asked for at the end of a run, not
        written every few seconds)."""
        from vllm_specdec_plugin.engine.schedule_report import snapshot

        return snapshot(self.controller, self.switchback if switchback else None, self.own_s,
                        self.steps, self.model_name, self.report_s)

    def write_report(self) -> None:
        from vllm_specdec_plugin.engine.schedule_report import publish
        from vllm_specdec_plugin.proposer.stats import write_atomically

        assert self.report_path is not None
        data = self.snapshot()
        try:
            publish(data)
            write_atomically(self.report_path, json.dumps(data))
        except Exception as exc:  # a full disk or a registry clash must not stop the engine or
            # the controller: say it once, stop writing
            patching.log(logging.WARNING, "vllm-specdec-plugin: schedule controller: "
                         "cannot write %s (%s); /metrics will not show its gauges",
                         self.report_path, exc)
            self.report_path = None


def graph_ceiling(vllm_config: Any) -> int | None:
    """The most query tokens a captured decode graph holds (`max_cudagraph_capture_size`), or
    None where the engine captures none (CPU, enforce_eager, cudagraph_mode NONE)."""
    compilation = getattr(vllm_config, "compilation_config", None)
    if compilation is None or getattr(getattr(vllm_config, "model_config", None),
                                       "enforce_eager", False):
        return None
    mode = getattr(compilation, "cudagraph_mode", None)
    size = getattr(compilation, "max_cudagraph_capture_size", None)
    if mode is None or str(getattr(mode, "name", mode)).upper() == "NONE" or not size:
        return None
    return int(size)


def control_spec() -> dict[str, Any] | None:
    """The hook's word for this process's engine (None: no controller)."""
    text = os.environ.get(CONTROL_ENV)
    if not text:
        return None
    try:
        spec = json.loads(text)
    except ValueError:
        return None
    return spec if isinstance(spec, dict) and isinstance(spec.get("schedule"), list) else None


def runtime_of(scheduler: Any) -> ControlledScheduler | None:
    """The scheduler's controller, made on its first step; None where it does not apply."""
    found = scheduler.__dict__.get(_RUNTIME, False)
    if found is not False:
        return found
    runtime = None
    spec = control_spec()
    lookup = getattr(scheduler, "dynamic_sd_lookup", None)
    speculative = getattr(getattr(scheduler, "vllm_config", None), "speculative_config", None)
    ranges = getattr(speculative, "num_speculative_tokens_per_batch_size", None)
    parallel = getattr(getattr(scheduler, "vllm_config", None), "parallel_config", None)
    # Only the schedule the plugin chose: a user's own ranges are never rewritten.
    if spec is not None and isinstance(lookup, list) and len(lookup) > 1 and ranges is not None \
            and [list(map(int, r)) for r in ranges] == spec["schedule"] \
            and getattr(parallel, "pipeline_parallel_size", 1) > 1:
        # Several batches in flight: a step's start is not its batch's (not measured there).
        patching.log(logging.INFO, "vllm-specdec-plugin: schedule controller off under "
                     "pipeline parallelism; the load-aware schedule stays the fixed table")
    elif spec is not None and isinstance(lookup, list) and len(lookup) > 1 and ranges is not None \
            and [list(map(int, r)) for r in ranges] == spec["schedule"]:
        try:
            runtime = ControlledScheduler(scheduler, spec)
        except Exception as exc:  # e.g. switchback arms outside this engine's k values
            patching.log(logging.WARNING, "vllm-specdec-plugin: schedule controller off: %s; "
                         "the load-aware schedule stays the fixed table", exc)
        else:
            patching.log(logging.INFO, "vllm-specdec-plugin: schedule controller on: k per "
                         "batch bucket among %s, prior %s%s", list(runtime.k_set),
                         spec["schedule"], f"; switchback {spec['switchback']}"
                         if spec.get("switchback") else "")
    scheduler.__dict__[_RUNTIME] = runtime
    return runtime


def give_up(scheduler: Any, runtime: ControlledScheduler, exc: Exception) -> None:
    """The controller failed on a step: the lookup goes back to the fixed table, the scheduler
    runs vLLM's code from the next step on, and one WARNING says why."""
    runtime.lookup[:] = runtime.prior
    scheduler.__dict__[_RUNTIME] = None
    patching.log(logging.WARNING, "vllm-specdec-plugin: schedule controller stopped (%s: %s); "
                 "the load-aware schedule is the fixed table again", type(exc).__name__, exc)


def _patch_scheduler(announce: bool) -> None:
    from vllm.v1.core.sched import scheduler as module

    owner = module.Scheduler
    schedule_original = inspect.getattr_static(owner, "schedule")
    update_original = inspect.getattr_static(owner, "update_from_output")
    patching.check_parameters(schedule_original, ["self", "throttle_prefills"],
                              f"{MODULE}.Scheduler.schedule")
    patching.check_parameters(update_original, ["self", "scheduler_output",
                                                "model_runner_output"],
                              f"{MODULE}.Scheduler.update_from_output")

    @functools.wraps(schedule_original)
    def schedule(self: Any, *args: Any, **kwargs: Any) -> Any:
        runtime = self.__dict__.get(_RUNTIME, False)
        if runtime is False:  # the scheduler's first step: is it controlled?
            runtime = runtime_of(self)
        if runtime is None:
            return schedule_original(self, *args, **kwargs)
        start = time.perf_counter()
        output = schedule_original(self, *args, **kwargs)
        done = time.perf_counter()
        runtime.started.append((output, start))
        runtime.own_s += time.perf_counter() - done
        return output

    @functools.wraps(update_original)
    def update_from_output(self: Any, scheduler_output: Any, model_runner_output: Any) -> Any:
        result = update_original(self, scheduler_output, model_runner_output)
        runtime = self.__dict__.get(_RUNTIME)
        if runtime:
            end = time.perf_counter()
            report_s = runtime.report_s
            try:
                runtime.observe(scheduler_output, model_runner_output, end, bool(self.running))
            except Exception as exc:  # the controller must never take the engine down
                give_up(self, runtime, exc)
                return result
            runtime.own_s += time.perf_counter() - end - (runtime.report_s - report_s)
        return result

    if not apply_patch(SCHEDULE_CONTROLLER.patch(
            owner, "schedule", "times each step and reads the k the controller wrote into "
            "dynamic_sd_lookup"), schedule, announce=announce):
        return
    patching.on_restore(SCHEDULE_CONTROLLER.name, functools.partial(
        patching.restore, UPDATE_PATCH))
    apply_patch(patching.Patch(UPDATE_PATCH, owner, "update_from_output",
                               "feeds each decode step to the schedule controller",
                               tested_on=SCHEDULE_CONTROLLER.tested_on, shortcut=True),
                update_from_output, announce=announce)
    prove(SCHEDULE_CONTROLLER, lambda: not _reaches_schedulers(module, schedule,
                                                               update_from_output),
          f"{MODULE}.Scheduler.schedule (and AsyncScheduler's)", announce)


def _reaches_schedulers(module: Any, schedule: Any, update: Any) -> bool:
    """The classes vLLM's engine core builds (`SchedulerConfig.get_scheduler_cls`: Scheduler,
    or AsyncScheduler with async scheduling) resolve both methods to the wrappers."""
    from vllm.v1.core.sched.async_scheduler import AsyncScheduler

    return all(cls.schedule is schedule and cls.update_from_output
               is update for cls in (module.Scheduler, AsyncScheduler))


UPDATE_PATCH = "schedule-controller-update"
SCHEDULE_CONTROLLER = Change(
    name="schedule-controller", kind="shortcut",
    targets=(f"{MODULE}.Scheduler.schedule", f"{MODULE}.Scheduler.update_from_output"),
    tested_on=("0.32", "0.33"), apply=_patch_scheduler,
    without="the load-aware schedule stays the fixed table", trigger=MODULE)


def configure(decision: Any, environ: Any = os.environ) -> str | None:
    """In the process that builds the engine config: tell the engine core (through
    `CONTROL_ENV`, which it inherits) to run the controller on the decision's schedule, or
    that it must not (a previous engine's word removed). Returns the snapshot file, or None.
    A bad `VLLM_SPECDEC_SWITCHBACK` stops the engine with an error naming it."""
    from vllm_specdec_plugin.core.errors import SpecDecodeConfigError
    from vllm_specdec_plugin.core.settings import ENV_SWITCHBACK

    environ.pop(CONTROL_ENV, None)
    config = decision.speculative_config or {}
    schedule = config.get("num_speculative_tokens_per_batch_size")
    arms = environ.get(ENV_SWITCHBACK) or None
    if not decision.schedule_control or not schedule:
        if arms:
            raise SpecDecodeConfigError(
                f"{ENV_SWITCHBACK}={arms!r} needs the schedule controller, which runs only on "
                "the plugin's own load-aware schedule (VLLM_SPECDEC_SCHEDULE=on, no "
                "speculative-config of your own): unset it")
        return None
    k_set = tuple(sorted({int(k) for _, _, k in schedule}))
    if arms:
        try:
            parse_arms(arms, k_set)
        except ValueError as exc:
            raise SpecDecodeConfigError(f"{ENV_SWITCHBACK} is refused: {exc}") from None
    import tempfile

    try:
        report: str | None = os.path.join(tempfile.mkdtemp(prefix="vllm-specdec-"),
                                          "schedule.json")
    except OSError as exc:  # a read-only /tmp: the controller runs, /metrics lacks its gauges
        patching.log(logging.WARNING, "vllm-specdec-plugin: schedule controller: no temporary "
                     "directory for its /metrics snapshot (%s); it runs without its gauges", exc)
        report = None
    environ[CONTROL_ENV] = json.dumps({"schedule": [list(map(int, r)) for r in schedule],
                                       "switchback": arms, "report": report})
    return report

"""Changes to vLLM's scheduler (`vllm.v1.core.sched.scheduler`): the online schedule controller.

`schedule-controller` (shortcut): `Scheduler.schedule` and `Scheduler.update_from_output` are
wrapped so that, on an engine whose speculative config carries the plugin's own load-aware
schedule (the hook says so through `CONTROL_ENV`), each decode step is timed and counted, fed to
`core/schedule_control.ScheduleController` (or, for benchmarks, `core/switchback.Switchback`),
and what it answers is written into `Scheduler.dynamic_sd_lookup`, the dense list vLLM 0.32 and
0.33 read at the end of every `schedule()` to set `num_spec_tokens_to_schedule`. Any other
engine (no schedule, a user's or a tuned preset's schedule, data parallelism: vLLM builds no
lookup; a schedule with one k: nothing to choose) runs vLLM's code untouched after one check
per scheduler. The controller's state is written for `/metrics` by a thread of its own
(`engine/schedule_report.SnapshotWriter`, every `REPORT_EVERY_S`).

A step's time is one whole engine cycle (`ControlledScheduler.observe`), the same in the
synchronous engine and the asynchronous one (`AsyncScheduler` inherits both wrappers); a step
with a prefill chunk in it is not measured (`Step.clean`), nor one with a request a client capped
(`core_sched_request_caps.py`). A step in which a request ended (`Scheduler.finished_req_ids`
after the update, which `schedule()` empties) counts the tokens vLLM emitted, not the drafts its
stats say were accepted past the request's end.
"""

from __future__ import annotations

import functools
import inspect
import json
import logging
import os
import time
from typing import Any

from vllm_specdec_plugin.core.switchback import parse_arms
from vllm_specdec_plugin.engine import patching
from vllm_specdec_plugin.engine.patching import Change, apply_patch, prove
from vllm_specdec_plugin.engine.schedule_runtime import ControlledScheduler, graph_ceiling

__all__ = ["CONTROL_ENV", "SCHEDULE_CONTROLLER", "ControlledScheduler", "configure",
           "control_spec", "graph_ceiling", "runtime_of"]

MODULE = "vllm.v1.core.sched.scheduler"
CONTROL_ENV = "_VLLM_SPECDEC_SCHEDULE_CONTROL"
"""Set by the engine hook in the process that builds the engine config (and so inherited by the
engine-core process): JSON {"schedule": the plugin's ranges, "switchback": arms or null,
"report": the snapshot file}. Not a user setting."""
_RUNTIME = "_specdec_schedule_runtime"
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
    found_lookup = getattr(scheduler, "dynamic_sd_lookup", None)
    lookup: list[int] = found_lookup if isinstance(found_lookup, list) else []
    speculative = getattr(getattr(scheduler, "vllm_config", None), "speculative_config", None)
    ranges = getattr(speculative, "num_speculative_tokens_per_batch_size", None)
    parallel = getattr(getattr(scheduler, "vllm_config", None), "parallel_config", None)
    # Only the schedule the plugin chose: a user's own ranges are never rewritten.
    ours = spec is not None and len(lookup) > 1 \
        and ranges is not None and [list(map(int, r)) for r in ranges] == spec["schedule"]
    if ours and getattr(parallel, "pipeline_parallel_size", 1) > 1:
        # Several batches in flight: a step's start is not its batch's (not measured there).
        patching.log(logging.INFO, "vllm-specdec-plugin: schedule controller off under "
                     "pipeline parallelism; the load-aware schedule stays the fixed table")
    elif ours and len(set(lookup[1:])) < 2:
        # Nothing to choose: no clock, no counts, no exploration (the decision's INFO line said
        # "controller on"; this says why it is not).
        patching.log(logging.INFO, "vllm-specdec-plugin: schedule controller off: the "
                     "schedule has one k (%s) at every batch size this engine runs", lookup[1])
    elif ours:
        assert spec is not None
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
    runtime.close()  # its decision thread writes nothing more
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
        if runtime is not None and not self.running:
            # Nothing running (none in flight either: a request stays in `running` until its
            # last update): the engine was idle, or every request was aborted, so the next
            # measured step's clock starts now (a later such schedule() moves it: an empty
            # step in between measures nothing). Otherwise it starts where the previous
            # update ended.
            runtime.idle_start = time.perf_counter()
        return schedule_original(self, *args, **kwargs)

    @functools.wraps(update_original)
    def update_from_output(self: Any, scheduler_output: Any, model_runner_output: Any) -> Any:
        result = update_original(self, scheduler_output, model_runner_output)
        runtime = self.__dict__.get(_RUNTIME)
        if runtime:
            end = time.perf_counter()
            try:
                runtime.observe(scheduler_output, model_runner_output, result, end,
                                self.finished_req_ids)
            except Exception as exc:  # the controller must never take the engine down
                give_up(self, runtime, exc)
                return result
            runtime.own_s += time.perf_counter() - end
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

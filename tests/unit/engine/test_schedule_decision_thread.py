"""The schedule controller's decision thread (`engine/schedule_runtime.ControlledScheduler`): the
engine thread only measures a step and hands it over; the controller's bookkeeping, decisions and
lookup writes run on a thread of their own, in step order, and a failure there reaches the
engine thread as the change's `give_up` (the fixed table, one WARNING), never vLLM's loop."""

from __future__ import annotations

import logging
import threading
import time
from types import SimpleNamespace

from vllm_specdec_plugin.core.schedule_control import ScheduleController, Step
from vllm_specdec_plugin.engine.changes.core_sched_scheduler import (
    _RUNTIME,
    ControlledScheduler,
    give_up,
)

SCHEDULE = [[1, 4, 5], [5, 8, 2], [9, 65536, 0]]
TABLE = [5] * 5 + [2] * 4 + [0] * 8


def controlled() -> tuple[SimpleNamespace, ControlledScheduler]:
    scheduler = SimpleNamespace(dynamic_sd_lookup=list(TABLE), vllm_config=None)
    runtime = ControlledScheduler(scheduler, {"schedule": SCHEDULE})
    scheduler.__dict__[_RUNTIME] = runtime
    return scheduler, runtime


class Engine:
    """vLLM's side of one decode step at batch 1, no stats: the k is what the lookup holds
    when the step is scheduled (as `schedule()` reads it); k=5 steps cost 3x and copy nothing,
    so the controller should leave k=5 for k=0."""

    def __init__(self, runtime: ControlledScheduler) -> None:
        self.runtime, self.clock = runtime, 1.0  # perf_counter never reads 0

    def step(self, device_s: float = 0.0) -> None:
        k = self.runtime.lookup[1]
        output = SimpleNamespace(num_scheduled_tokens={"a": 1 + k},
                                 total_num_scheduled_tokens=1 + k,
                                 scheduled_spec_decode_tokens={"a": [9] * k} if k else {},
                                 num_spec_tokens_to_schedule=k)
        if not self.runtime.last_end:  # as schedule() does with nothing running yet
            self.runtime.idle_start = self.clock
        self.clock += 0.010 * (3 if k else 1)
        self.runtime.observe(output, SimpleNamespace(sampled_token_ids=[[7]]), {},
                             self.clock)
        if device_s:
            time.sleep(device_s)  # the next forward pass: the engine thread lets the GIL go


def test_steps_reach_the_controller_on_its_thread_in_order_and_unchanged():
    """The same steps fed inline to a fresh controller give the same answers and table, and the
    lookup holds what those answers wrote."""
    scheduler, runtime = controlled()
    seen: list[Step] = []
    threads: set[str] = set()
    observe = runtime.controller.observe

    def recording(step: Step) -> tuple[int, int] | None:
        seen.append(step)
        threads.add(threading.current_thread().name)
        return observe(step)

    runtime.controller.observe = recording  # type: ignore[method-assign]
    engine = Engine(runtime)
    for _ in range(600):
        engine.step()
        assert runtime.drain()  # as if each step's device time let the thread take it
    assert threads == {"vllm-specdec-schedule"}  # never the engine thread
    assert runtime.steps == len(seen) == 600

    inline = ScheduleController(TABLE, (0, 2, 5))
    lookup = list(TABLE)
    for step in seen:
        change = inline.observe(step)
        if change is not None and change[0] == 1:
            lookup[1] = change[1]
    assert inline.table() == runtime.controller.table() == {1: 0}
    assert scheduler.dynamic_sd_lookup[1] == lookup[1] == 0


def test_a_decision_a_step_late_still_converges():
    """Without waiting for the thread (the engine schedules on while it decides, during the
    device's step), the k a step ran at may be the one before the write: the controller still
    leaves the 3x slower k, and the lookup holds what it last wrote (k=0, or the k of an
    exploration block the run ended in: k=2 is still looked at now and then)."""
    scheduler, runtime = controlled()
    engine = Engine(runtime)
    for _ in range(1500):
        engine.step(device_s=0.0005)
    assert runtime.drain()
    assert runtime.controller.table()[1] == 0
    assert scheduler.dynamic_sd_lookup[1] == runtime.controller.k_for(1)


def test_a_failure_on_the_decision_thread_gives_the_table_back(plugin_log):
    """The controller raising on its thread: the engine thread's next step raises it, which the
    change turns into `give_up`: the thread stopped, the lookup the fixed table, one WARNING."""
    scheduler, runtime = controlled()
    engine = Engine(runtime)
    for _ in range(5):
        engine.step()
    assert runtime.drain()

    def boom(step: Step) -> None:
        raise RuntimeError("boom")

    runtime.controller.observe = boom  # type: ignore[method-assign, assignment]
    scheduler.dynamic_sd_lookup[1:5] = [0] * 4  # what the controller had written
    engine.step()
    assert not runtime.drain(timeout=5)  # stopped, and it says so
    try:
        engine.step()
    except RuntimeError as exc:
        give_up(scheduler, runtime, exc)  # what the change's update wrapper does
    else:
        raise AssertionError("the failure did not reach the engine thread")
    assert scheduler.dynamic_sd_lookup == TABLE and scheduler.__dict__[_RUNTIME] is None
    warnings = plugin_log.at(logging.WARNING)
    assert len(warnings) == 1 and "boom" in warnings[0]


def test_give_up_stops_the_thread_before_the_table_goes_back():
    """Steps still queued when the controller is given up write nothing after the table is
    back (the thread is closed first)."""
    scheduler, runtime = controlled()
    engine = Engine(runtime)
    for _ in range(1500):
        engine.step()  # no drain: steps queued, some of them writing k=0
    give_up(scheduler, runtime, RuntimeError("stop"))
    assert runtime.decisions._thread is None
    assert scheduler.dynamic_sd_lookup == TABLE
    threading.Event().wait(0.2)
    assert scheduler.dynamic_sd_lookup == TABLE


def test_a_failure_on_the_first_step_reaches_the_engine_and_a_closed_thread_keeps_nothing():
    """The thread failing on the very step that started it still reaches the engine thread's
    next hand-over (the hand-over became the deque's `append` before the thread started, and
    the failure replaced it); once closed, steps handed over are dropped, not queued."""
    for _ in range(20):  # the thread's start races the engine thread's next step
        _, runtime = controlled()

        def boom(step: Step) -> None:
            raise RuntimeError("boom")

        runtime.controller.observe = boom  # type: ignore[method-assign, assignment]
        engine = Engine(runtime)
        engine.step()
        assert not runtime.drain(timeout=5)
        try:
            engine.step()
        except RuntimeError as exc:
            assert str(exc) == "boom"
        else:
            raise AssertionError("the failure did not reach the engine thread")
        runtime.close()
        for _ in range(50):
            engine.step()
        assert not runtime.decisions.pending

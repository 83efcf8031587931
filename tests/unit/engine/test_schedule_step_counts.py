"""What the engine thread hands the schedule controller's decision thread per step
(`ControlledScheduler.observe` in `engine/schedule_runtime.py`) and what the controller then
sees: O(1) counts from vLLM's spec-decoding stats on the engine thread, and on a step in which a
request ended the step's sampled lists handed over as they are, counted on the decision thread
(`counted`). The real scheduler's counts are checked against the tokens vLLM emitted in the
0.32 and 0.33 contracts (`tests/support/controller_contract.counts`)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from vllm_specdec_plugin.engine.changes.core_sched_scheduler import ControlledScheduler
from vllm_specdec_plugin.engine.schedule_runtime import counted

SCHEDULE = [[1, 4, 5], [5, 8, 2], [9, 65536, 0]]
TABLE = [5] * 5 + [2] * 4 + [0] * 8


def runtime(log_stats: bool) -> tuple[ControlledScheduler, list[Any]]:
    """A controller whose hand-over is recorded instead of sent to its thread."""
    scheduler = SimpleNamespace(dynamic_sd_lookup=list(TABLE), vllm_config=None,
                                log_stats=log_stats)
    made = ControlledScheduler(scheduler, {"schedule": SCHEDULE})
    handed: list[Any] = []
    made.decisions.hand = handed.append  # type: ignore[method-assign]
    return made, handed


def step(rows: list[list[int]], accepted: int, per_position: list[int] | None = None
         ) -> tuple[Any, Any, Any]:
    """A decode step of two rows drafting 2 each; vLLM's stats say `accepted` drafts were
    accepted (`per_position`: past each position; before the update cut a row at its
    request's end), `rows` are what it emitted."""
    output = SimpleNamespace(num_scheduled_tokens={"a": 3, "b": 3}, total_num_scheduled_tokens=6,
                             num_spec_tokens_to_schedule=2,
                             scheduled_spec_decode_tokens={"a": [1, 2], "b": [1, 2]})
    stats = SimpleNamespace(spec_decoding_stats=SimpleNamespace(
        num_accepted_tokens=accepted, num_draft_tokens=4, num_drafts=2,
        num_accepted_tokens_per_pos=per_position or [2, accepted - 2]))
    return output, SimpleNamespace(sampled_token_ids=rows), {0: SimpleNamespace(
        scheduler_stats=stats)}


@pytest.mark.parametrize("log_stats", [True, False])
def test_a_step_in_which_a_request_ended_is_counted_off_the_engine_thread(log_stats):
    """Row b ended after its first token though its two drafts were accepted: the stats say 6
    tokens, vLLM emitted 4. The engine thread hands the rows over uncounted (the same list: no
    pass over the batch on its path); the controller sees 4."""
    made, handed = runtime(log_stats)
    rows = [[7, 8, 8], [7]]
    output, runner, result = step(rows, accepted=4)
    made.observe(output, runner, result, 1.0)  # the first step only starts the clock
    made.observe(output, runner, result, 1.5, finished={"b"})
    assert handed[-1][3] is rows
    # its accepted counts overrun the end too: the step is not counted per position
    assert counted(handed[-1])[:7] == (2, 2, 0.5, 4, 4, True, -1)
    seen: list[Any] = []
    made.controller.observe = lambda s: seen.append(s)  # type: ignore[method-assign]
    made._apply(handed[-1])
    assert seen[-1].tokens == 4 and seen[-1].clean
    made.close()


def test_a_step_in_which_no_request_ended_takes_the_stats_as_they_are():
    """Its counts too: the rows that drafted and vLLM's own list of drafts accepted past
    each position (the same list, not copied on the engine thread)."""
    made, handed = runtime(True)
    per_position = [2, 1]
    output, runner, result = step([[7, 8, 8], [7, 8]], accepted=3, per_position=per_position)
    made.observe(output, runner, result, 1.0)
    made.observe(output, runner, result, 1.5)
    assert handed[-1] == (2, 2, 0.5, 5, 4, True, 2, [2, 1])
    assert handed[-1][7] is per_position
    made.close()


def test_a_step_without_the_stats_is_not_counted_per_position():
    made, handed = runtime(False)
    output, runner, result = step([[7, 8, 8], [7, 8]], accepted=3)
    made.observe(output, runner, result, 1.0)
    made.observe(output, runner, result, 1.5)
    assert counted(handed[-1]) == (2, 2, 0.5, 5, 4, True, -1, ())
    made.close()


def test_a_step_with_fewer_tokens_than_rows_is_not_clean():
    """Every row of a decode step samples at least one token; fewer (a row vLLM discarded)
    is no decode step to learn from."""
    assert counted((2, 2, 0.5, [[7], []], 4, True, -1, ())) == (2, 2, 0.5, 1, 4, False, -1, ())
    assert counted((2, 2, 0.5, 5, 4, True, 2, [1, 1])) == (2, 2, 0.5, 5, 4, True, 2, [1, 1])

"""The schedule controller's snapshot writer (`engine/schedule_report.SnapshotWriter`): the
snapshot for /metrics is taken and written on a thread of its own, never on the engine's step
path; a read that meets the engine thread's change is taken again; a failure stops the writing
with one WARNING and never reaches the controller."""

from __future__ import annotations

import json
import logging
import threading
import time
from pathlib import Path
from types import SimpleNamespace

from vllm_specdec_plugin.engine import patching
from vllm_specdec_plugin.engine.schedule_report import SnapshotWriter


def wait_for(condition, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.005)
    return False


class Source:
    """A stand-in for the controller's state: `take` records the thread it ran on."""

    def __init__(self, failures: int = 0, error: type[Exception] = RuntimeError) -> None:
        self.steps, self.failures, self.error = 1, failures, error
        self.threads: list[int] = []

    def take(self) -> dict:
        self.threads.append(threading.get_ident())
        if self.failures:
            self.failures -= 1
            raise self.error("dictionary changed size during iteration")
        return {"steps": self.steps}


def writer_for(path: Path, source: Source, every_s: float = 60.0) -> SnapshotWriter:
    return SnapshotWriter(str(path), source.take, lambda: source.steps, every_s, patching.log)


def test_the_snapshot_is_taken_and_written_off_the_calling_thread(tmp_path):
    source = Source()
    writer = writer_for(tmp_path / "s.json", source)
    writer.poke()
    assert wait_for(lambda: (tmp_path / "s.json").exists())
    assert json.loads((tmp_path / "s.json").read_text()) == {"steps": 1}
    assert source.threads and threading.get_ident() not in source.threads
    assert writer.seconds > 0.0


def test_the_thread_rewrites_on_its_own_clock_and_only_after_new_steps(tmp_path):
    source = Source()
    writer = writer_for(tmp_path / "s.json", source, every_s=0.02)
    writer.poke()
    assert wait_for(lambda: writer.written == 1)
    time.sleep(0.2)  # ten rounds with no new step: nothing taken again
    assert len(source.threads) == 1
    source.steps = 7  # the engine stepped: the next round writes without a poke
    assert wait_for(lambda: json.loads((tmp_path / "s.json").read_text()) == {"steps": 7})


def test_a_read_that_meets_the_engine_threads_change_is_taken_again(tmp_path, plugin_log):
    source = Source(failures=SnapshotWriter.RETRIES - 1)
    writer = writer_for(tmp_path / "s.json", source)
    assert writer.write_once()
    assert json.loads((tmp_path / "s.json").read_text()) == {"steps": 1}
    assert not plugin_log.at(logging.WARNING)


def test_a_snapshot_that_cannot_be_taken_stops_the_writing_with_one_warning(
        tmp_path, plugin_log):
    for error in (RuntimeError, ValueError, ZeroDivisionError, KeyError):
        source = Source(failures=100, error=error)
        writer = writer_for(tmp_path / "s.json", source)
        assert not writer.write_once() and writer.stopped
        assert not writer.write_once()  # stopped: not tried again
        assert len(source.threads) <= SnapshotWriter.RETRIES
    assert len(plugin_log.at(logging.WARNING)) == 4
    assert not (tmp_path / "s.json").exists()


def test_an_unwritable_snapshot_file_stops_the_writing_not_the_controller(tmp_path, plugin_log):
    """The runtime's step path keeps running after the writer gave up."""
    from vllm_specdec_plugin.engine.schedule_runtime import ControlledScheduler

    table = [5] * 5 + [2] * 4 + [0] * 8
    scheduler = SimpleNamespace(dynamic_sd_lookup=list(table), vllm_config=None)
    runtime = ControlledScheduler(scheduler, {"schedule": [[1, 4, 5], [5, 8, 2], [9, 65536, 0]],
                                              "report": str(tmp_path / "no" / "dir" / "s.json")})
    assert runtime.writer is not None
    output = SimpleNamespace(num_scheduled_tokens={"a": 1}, total_num_scheduled_tokens=1,
                             scheduled_spec_decode_tokens={}, num_spec_tokens_to_schedule=5)
    runner = SimpleNamespace(sampled_token_ids=[[7]])
    for step in range(40):
        if not runtime.last_end:
            runtime.idle_start = 1 + step * 0.01
        runtime.observe(output, runner, {}, 1 + step * 0.01 + 0.005)
    assert wait_for(lambda: runtime.writer.stopped)
    assert runtime.steps == 40
    runtime.write_report()  # asked for after it stopped: nothing, no second warning
    assert len([line for line in plugin_log.at(logging.WARNING) if "cannot write" in line]) == 1

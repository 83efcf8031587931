"""The files the adaptive proposer writes (issue 29, defect 6): one writer per path, a fresh
temporary file in the target's directory, never a write through a symbolic link.

The worker's ranks are read from vLLM's own `vllm.distributed.parallel_state`; a tensor-parallel
worker is simulated by setting that module's process groups to stand-ins with a `rank_in_group`.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from vllm_specdec_plugin.core.settings import ENV_ADAPTIVE_STATS, ENV_ADAPTIVE_TRACE
from vllm_specdec_plugin.proposer import stats as stats_module
from vllm_specdec_plugin.proposer.stats import worker_paths, write_stats
from vllm_specdec_plugin.proposer.trace import TraceWriter

VICTIM = "not the proposer's file\n"


class Log:
    def __init__(self) -> None:
        self.warnings: list[str] = []
        self.debugs: list[str] = []

    def warning(self, msg: str, *args: object) -> None:
        self.warnings.append(msg % args)

    def debug(self, msg: str, *args: object) -> None:
        self.debugs.append(msg % args)


def victim(tmp_path: Path) -> Path:
    target = tmp_path / "elsewhere" / "victim"
    target.parent.mkdir()
    target.write_text(VICTIM)
    return target


def set_ranks(monkeypatch: pytest.MonkeyPatch, tp: int, world: int) -> None:
    """vLLM's process groups as a worker of a tensor-parallel engine sees them."""
    from vllm.distributed import parallel_state

    monkeypatch.setattr(parallel_state, "_TP", SimpleNamespace(rank_in_group=tp))
    monkeypatch.setattr(parallel_state, "_PP", SimpleNamespace(rank_in_group=0))
    monkeypatch.setattr(parallel_state, "_WORLD", SimpleNamespace(rank_in_group=world))


def run_proposer(monkeypatch: pytest.MonkeyPatch, stats: Path, trace: Path) -> None:
    """Build the proposer with both files configured and run a copying request through it."""
    from test_proposer import Simulated

    monkeypatch.setenv(ENV_ADAPTIVE_STATS, str(stats))
    monkeypatch.setenv(ENV_ADAPTIVE_TRACE, str(trace))
    sim = Simulated(monkeypatch, rows=2, copying=lambda row: True)
    for _ in range(60):
        sim.step()
    assert sim.drafter.stats.draft_tokens > 0


def test_a_link_at_the_stats_path_or_its_old_temp_name_is_not_written_through(tmp_path):
    target = victim(tmp_path)
    path = tmp_path / "stats.json"
    path.symlink_to(target)
    Path(f"{path}.tmp").symlink_to(target)  # the name the file was once written through
    write_stats(str(path), {"calls": 1, "rows": 1, "overhead_s": 0.0}, {}, Log())
    assert target.read_text() == VICTIM
    assert not path.is_symlink() and json.loads(path.read_text())["calls"] == 1
    assert stat_mode(path) == 0o644


def stat_mode(path: Path) -> int:
    return path.stat().st_mode & 0o777


def test_the_temporary_file_is_new_in_the_target_directory_and_removed(tmp_path, monkeypatch):
    renames: list[tuple[str, str]] = []
    replace = os.replace

    def spy(src: str, dst: str) -> None:
        renames.append((src, dst))
        replace(src, dst)

    monkeypatch.setattr(stats_module.os, "replace", spy)
    path = tmp_path / "stats.json"
    for calls in (1, 2):
        write_stats(str(path), {"calls": calls, "rows": 1, "overhead_s": 0.0}, {}, Log())
    (first, _), (second, _) = renames
    assert first != second  # a fresh name each time
    assert {Path(first).parent, Path(second).parent} == {tmp_path}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["stats.json"]  # none left over


def test_an_unwritable_stats_directory_is_logged_at_debug_and_leaves_nothing(tmp_path):
    log = Log()
    write_stats(str(tmp_path / "missing" / "stats.json"), {"calls": 1, "rows": 0,
                                                          "overhead_s": 0.0}, {}, log)
    assert len(log.debugs) == 1 and not (tmp_path / "missing").exists()


def test_a_link_at_the_trace_path_is_refused_with_one_warning(tmp_path):
    target = victim(tmp_path)
    path = tmp_path / "trace.jsonl"
    path.symlink_to(target)
    log = Log()
    assert TraceWriter.open(str(path), log) is None
    assert len(log.warnings) == 1 and "symbolic link" in log.warnings[0]
    assert target.read_text() == VICTIM


def test_a_trace_path_that_is_not_a_regular_file_is_refused(tmp_path):
    fifo = tmp_path / "trace.fifo"
    os.mkfifo(fifo)
    log = Log()
    assert TraceWriter.open(str(fifo), log) is None  # neither blocks nor writes
    assert len(log.warnings) == 1


def test_the_trace_is_appended_to_a_regular_file(tmp_path):
    path = tmp_path / "trace.jsonl"
    path.write_text("[0]\n")
    writer = TraceWriter.open(str(path), Log())
    assert writer is not None
    candidate = SimpleNamespace(band=1, full=False, drafted=2, calibrated=1.5)
    writer.write(3, 2, 7, "ngram", candidate, 2, 0, 3)
    assert path.read_text().splitlines() == ["[0]", '[3, 2, 7, "ngram", 1, false, 2, 2, 0, 3, 1.5]']


def test_not_initialised_a_single_process_writes_both_files(tmp_path, monkeypatch):
    from vllm.distributed import parallel_state

    assert not parallel_state.model_parallel_is_initialized()
    stats, trace = tmp_path / "stats.json", tmp_path / "trace.jsonl"
    assert worker_paths(str(stats), str(trace)) == [str(stats), str(trace)]
    assert worker_paths(None, "") == [None, None]
    run_proposer(monkeypatch, stats, trace)
    assert json.loads(stats.read_text())["calls"] > 0 and trace.read_text()


def test_tensor_parallel_rank_1_writes_nothing(tmp_path, monkeypatch):
    set_ranks(monkeypatch, tp=1, world=1)
    stats, trace = tmp_path / "stats.json", tmp_path / "trace.jsonl"
    run_proposer(monkeypatch, stats, trace)
    assert list(tmp_path.iterdir()) == []


def test_another_engines_first_rank_writes_its_own_names(tmp_path, monkeypatch):
    """Data parallelism: the second engine's tensor-parallel rank 0 is world rank 2 of 4."""
    set_ranks(monkeypatch, tp=0, world=2)
    stats, trace = tmp_path / "stats.json", tmp_path / "trace.jsonl"
    run_proposer(monkeypatch, stats, trace)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["stats.json.rank2",
                                                         "trace.jsonl.rank2"]
    assert np.isfinite(json.loads((tmp_path / "stats.json.rank2").read_text())["calls"])


def test_a_process_that_exits_right_after_its_last_call_leaves_that_call_in_the_file(tmp_path):
    """An engine in the caller's own process (vLLM without multiprocessing, LLM() in a script)
    may exit before the idle writer wakes: the file is written once more at exit."""
    import subprocess
    import sys

    path = tmp_path / "stats.json"
    script = f"""
import logging
from vllm_specdec_plugin.proposer.stats import StatsFile
calls = {{"calls": 0, "requests": 1}}
stats_file = StatsFile({str(path)!r}, lambda: (dict(calls), {{}}), logging.getLogger(),
                       every=1000, idle_s=60.0)
for _ in range(7):
    calls["calls"] += 1
    with stats_file.lock:
        stats_file.called(type("S", (), calls)())
"""
    subprocess.run([sys.executable, "-c", script], check=True, timeout=60)
    assert json.loads(path.read_text())["calls"] == 7

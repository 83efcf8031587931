"""The schedule controller's adapter (`engine/changes/core_sched_scheduler.py`) reading vLLM's
own config objects: the largest captured decode graph, and a report directory that cannot be
made (a read-only /tmp) leaving the controller on without its gauges."""

from __future__ import annotations

import logging
import tempfile
from types import SimpleNamespace

import pytest

from vllm_specdec_plugin.engine.changes.core_sched_scheduler import (
    CONTROL_ENV,
    configure,
    graph_ceiling,
)


def config(eager: bool = False, **compilation: object) -> SimpleNamespace:
    from vllm.config import CompilationConfig

    return SimpleNamespace(compilation_config=CompilationConfig(**compilation),
                           model_config=SimpleNamespace(enforce_eager=eager))


def test_graph_ceiling_is_vllms_capture_size_where_graphs_are_captured():
    from vllm.config import CUDAGraphMode

    assert graph_ceiling(config(cudagraph_mode=CUDAGraphMode.FULL_AND_PIECEWISE,
                                max_cudagraph_capture_size=512)) == 512
    assert graph_ceiling(config(cudagraph_mode=CUDAGraphMode.PIECEWISE,
                                max_cudagraph_capture_size=256)) == 256


@pytest.mark.parametrize("case", ["none-mode", "eager", "no-config"])
def test_no_graphs_no_ceiling(case):
    from vllm.config import CUDAGraphMode

    found = {"none-mode": config(cudagraph_mode=CUDAGraphMode.NONE,
                                 max_cudagraph_capture_size=512),
             "eager": config(eager=True, cudagraph_mode=CUDAGraphMode.FULL_AND_PIECEWISE,
                             max_cudagraph_capture_size=512),
             "no-config": None}[case]
    assert graph_ceiling(found) is None


def test_an_unwritable_temp_dir_keeps_the_controller_without_its_gauges(monkeypatch,
                                                                       plugin_log):
    def refuse(prefix: str = "") -> str:
        raise PermissionError(30, "Read-only file system", "/tmp")

    monkeypatch.setattr(tempfile, "mkdtemp", refuse)
    decision = SimpleNamespace(schedule_control=True, speculative_config={
        "num_speculative_tokens_per_batch_size": [[1, 4, 5], [5, 8, 2], [9, 65536, 0]]})
    environ: dict[str, str] = {}
    assert configure(decision, environ) is None
    assert '"report": null' in environ[CONTROL_ENV]  # the controller still runs
    assert any("Read-only file system" in line for line in plugin_log.at(logging.WARNING))


PLUGINS_SCHEDULE = [[1, 4, 5], [5, 8, 2], [9, 65536, 0]]


def scheduler_with(ranges: list[list[int]]) -> SimpleNamespace:
    """The attributes `runtime_of` reads of vLLM's `Scheduler`: its lookup and its config."""
    return SimpleNamespace(
        dynamic_sd_lookup=[5] * 5 + [2] * 4 + [0] * 8,
        vllm_config=SimpleNamespace(
            speculative_config=SimpleNamespace(num_speculative_tokens_per_batch_size=ranges),
            parallel_config=SimpleNamespace(pipeline_parallel_size=1)))


@pytest.mark.parametrize("ranges", [PLUGINS_SCHEDULE, [[1, 2, 5], [3, 1024, 0]],
                                    [[1, 4, 5], [5, 8, 2], [9, 65536, 1]]])
def test_the_controller_takes_only_the_schedule_the_plugin_chose(monkeypatch, ranges):
    """The control word is in the process env, so an engine that no opted-in hook prepared (a
    process that inherits the word, a second `LLM()` without the opt-in and with the user's own
    per-batch schedule) still finds it: the controller takes over only where the engine's
    ranges are the ones the plugin chose."""
    from vllm_specdec_plugin.engine.changes.core_sched_scheduler import runtime_of

    environ: dict[str, str] = {}
    configure(SimpleNamespace(schedule_control=True, speculative_config={
        "num_speculative_tokens_per_batch_size": PLUGINS_SCHEDULE}), environ)
    monkeypatch.setenv(CONTROL_ENV, environ[CONTROL_ENV])
    scheduler = scheduler_with(ranges)
    lookup = list(scheduler.dynamic_sd_lookup)
    runtime = runtime_of(scheduler)
    assert (runtime is not None) == (ranges == PLUGINS_SCHEDULE)
    if runtime is None:
        assert scheduler.dynamic_sd_lookup == lookup  # a user's schedule, untouched


@pytest.mark.parametrize("lookup", [[5] * 5, [0, 2, 2, 2], [5, 5]])
def test_a_schedule_with_one_k_gets_no_controller(monkeypatch, plugin_log, lookup):
    """An engine whose lookup holds one k at every batch size it runs (a small max_num_seqs
    inside the table's first range) has nothing to choose: no controller, one INFO line."""
    from vllm_specdec_plugin.engine.changes.core_sched_scheduler import runtime_of

    environ: dict[str, str] = {}
    configure(SimpleNamespace(schedule_control=True, speculative_config={
        "num_speculative_tokens_per_batch_size": PLUGINS_SCHEDULE}), environ)
    monkeypatch.setenv(CONTROL_ENV, environ[CONTROL_ENV])
    scheduler = scheduler_with(PLUGINS_SCHEDULE)
    scheduler.dynamic_sd_lookup = list(lookup)
    assert runtime_of(scheduler) is None
    assert scheduler.dynamic_sd_lookup == lookup
    assert any("schedule has one k" in line for line in plugin_log.at(logging.INFO))
    two = scheduler_with(PLUGINS_SCHEDULE)  # the same engine with two k: controlled
    assert runtime_of(two) is not None

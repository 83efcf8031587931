"""The drafter interface `whatif/replay.py`'s Python loop drives (kept apart so the drafters of
`whatif/replay_adaptive.py` and the loop that drives them import it without importing each
other), which drafter the target host's vLLM runs for each method (`host_drafter`), and whether
it schedules asynchronously there, beside a plain engine (`async_scheduling`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from vllm_specdec_plugin.engine.releases import release_key


class Drafter:
    """One method's drafter as `replay_python` drives it, in the engine's call order: `start`
    before a request's first proposal (`rows`: the (1, max_model_len) token row, holding the
    prompt and the prefill's token), `propose` after every step (the prefill's included) with
    the context length and the tokens the step emitted, `verified` after each verify step with
    the draft tokens it verified, `finish` after the request's last step (the engine proposes
    there too; the draft is thrown away), `close` after the traffic."""

    def start(self, index: int, prompt_len: int, n: int, rows: np.ndarray) -> None:
        raise NotImplementedError

    def propose(self, num_tokens: int, emitted: list[int]) -> Sequence[int]:
        raise NotImplementedError

    def verified(self, drafted: int) -> None:  # noqa: B027 (nothing by default)
        pass

    def finish(self, num_tokens: int, emitted: list[int]) -> None:
        raise NotImplementedError

    def close(self) -> None:  # noqa: B027 (nothing to release by default)
        pass

    @property
    def notes(self) -> tuple[str, ...]:
        """What the result should say about this drafter, after the replay."""
        return ()


V1_NGRAM, MRV2_NGRAM, V1_SUFFIX, V1_ADAPTIVE = ("v1-ngram", "mrv2-ngram-gpu", "v1-suffix",
                                                "v1-adaptive")
"""The drafters `replay.replay` runs: vLLM's V1 n-gram matcher, Model Runner V2's
`NgramGPUSpeculator` (`replay_mrv2.py`), arctic-inference's suffix tree as vLLM's V1 runner
drives it, the plugin's `AdaptiveProposer` (a `custom_class`, V1 runner)."""
RUNNERS = ("v1", "v2")
"""`--runner`: the model runner the target host's vLLM uses, as `VLLM_USE_V2_MODEL_RUNNER`
(1: v2, 0: v1) would force it."""
V1_MATCHER = "its V1 n-gram matcher drafts only on a match, ties to the earliest"
MRV2_DRAFTER = ("its n-gram drafter (NgramGPUSpeculator) drafts k tokens every step (the last "
                "token where nothing matches), ties to the rightmost match")


@dataclass(frozen=True)
class HostDrafter:
    """The drafter vLLM runs for a method on the target host, and why (one line)."""

    name: str
    why: str


def host_drafter(method: str, platform: str, runner: str | None = None) -> HostDrafter:
    """The drafter the target's vLLM runs for `method` on `platform` (cpu, cuda, rbln), with
    `runner` as `VLLM_USE_V2_MODEL_RUNNER` sets it (None: vLLM's own choice): vLLM 0.32/0.33
    run Model Runner V2 where Triton is present (a CUDA host; on a CPU host vLLM disables
    Triton) unless the method is one V2 lacks (suffix, custom_class: `VllmConfig.
    _get_v2_model_runner_unsupported_features`). A runner vLLM would refuse: one line."""
    from vllm_specdec_plugin.core.errors import SpecDecodeConfigError

    if runner is not None and runner not in RUNNERS:
        raise SpecDecodeConfigError(f"--runner {runner!r}: give v1 or v2")
    if runner == "v2" and platform != "cuda":
        raise SpecDecodeConfigError(
            f"--runner v2 with --platform {platform}: whatif replays Model Runner V2 on cuda "
            "only (its n-gram drafter needs Triton, which vLLM disables on CPU hosts); use "
            "--platform cuda or drop --runner")
    if runner == "v2" and method != "ngram":
        vllm_method = "custom_class" if method == "adaptive" else method
        raise SpecDecodeConfigError(
            f"--runner v2 with --method {method}: vLLM's Model Runner V2 has no drafter for "
            f"{vllm_method!r} (VLLM_USE_V2_MODEL_RUNNER=1 makes the engine refuse it); pass "
            "--method ngram or drop --runner")
    if method == "suffix" or method == "adaptive":
        name, what = ((V1_SUFFIX, "suffix decoding") if method == "suffix" else
                      (V1_ADAPTIVE, "the plugin's proposer (a custom_class)"))
        where = ("Model Runner V2 does not support it, so vLLM keeps the V1 model runner"
                 if platform == "cuda" else f"the V1 model runner on {platform}")
        return HostDrafter(name, f"{what}: {where}")
    if runner == "v1":
        return HostDrafter(V1_NGRAM, f"--runner v1 (VLLM_USE_V2_MODEL_RUNNER=0): vLLM's V1 "
                                     f"model runner; {V1_MATCHER}")
    if platform == "cuda":
        why = ("--runner v2 (VLLM_USE_V2_MODEL_RUNNER=1): Model Runner V2" if runner == "v2" else
               "vLLM 0.32/0.33 run Model Runner V2 on a CUDA host with Triton")
        return HostDrafter(MRV2_NGRAM, f"{why}; {MRV2_DRAFTER}")
    host = ("vLLM disables Triton on a CPU host, so it runs the V1 model runner" if
            platform == "cpu" else "vllm-rbln's model runner drafts with vLLM's V1 proposers")
    return HostDrafter(V1_NGRAM, f"{host}; {V1_MATCHER}")


@dataclass(frozen=True)
class AsyncScheduling:
    """Async scheduling on the target host, as the prediction prices it for one method."""

    hidden_s: float | None
    """Host seconds per step the plain engine's async scheduling hides and the speculating
    engine's does not (0: both engines schedule alike; None: not priced)."""
    why: str


def async_scheduling(method: str, drafter: str, platform: str, host_overhead_s: float,
                     vllm_release: str | None) -> AsyncScheduling:
    """How the target's vLLM schedules a plain engine and one speculating with `method` through
    `drafter`, by the rules of `vllm_release` (the installed vLLM's: whatif resolves the configs
    with it). A plain engine schedules asynchronously on a CUDA host (vLLM's default) and on
    RBLN (vllm-rbln 0.12's defaults), never on a CPU host. A speculating one: vLLM 0.32's
    `VllmConfig` keeps it only for EAGLE, MTP, draft-model, ngram_gpu, DSpark and DFlash
    drafters, whichever the runner; 0.33 applies that check to the V1 runner only, so Model
    Runner V2's ngram keeps it; vllm-rbln 0.12 turns it off under any speculation."""
    vllm_method = "custom_class" if method == "adaptive" else method
    if platform == "cpu":
        return AsyncScheduling(0.0, "off in both engines (vLLM's CPU platform turns it off)")
    if platform == "rbln":
        return AsyncScheduling(None, (
            "not priced: vllm-rbln 0.12 runs a plain engine with it (VLLM_RBLN_USE_DEVICE_TENSOR "
            "and its on-device sampler, both on by default) and turns it off under speculation; "
            "no figure of the host work it hides on an RBLN host is known, so the speedups are "
            "too kind to speculation by that work"))
    release = release_key(vllm_release) or (0, 0)  # unreadable: the older rule
    if drafter == MRV2_NGRAM and release >= (0, 33):
        return AsyncScheduling(0.0, (
            f"on in both engines: vLLM {vllm_release} checks a method against async scheduling "
            "on the V1 model runner only, and Model Runner V2 runs ngram (vLLM 0.32 runs it "
            "synchronously: whatif with vLLM 0.32 installed prices that)"))
    where = ("whichever the runner" if release < (0, 33) else "on the V1 model runner")
    return AsyncScheduling(host_overhead_s, (
        f"priced: the plain engine runs it (vLLM's default on a CUDA host) and {vllm_method} "
        f"turns it off (vLLM {vllm_release or '(version unreadable)'} keeps it for EAGLE, MTP, "
        f"draft-model and ngram_gpu drafters only, {where}), so the plain step hides "
        f"{host_overhead_s * 1e3:.3f} ms of host work per step (the row's host_overhead_s: "
        "SpecDecode-Bench's per-step time beside the forward pass on an H100, assumed for "
        "every GPU)"))

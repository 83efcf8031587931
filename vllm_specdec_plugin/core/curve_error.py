"""The model error of the step-cost curve that priced a prediction, per pricing source.

What is known, in one place:

- the `cpu` row: its residuals against the SmolLM2-135M steps it was fitted to
  (`CPU_FIT_STEPS_MS`, from benchmarks/results/schedule-switchback.json), computed here with
  the roofline itself (`cpu_residuals`); in-sample and 4 points, so a floor on its error on
  another host or model, not a bound;
- the GPU rows: no error figure. Their efficiencies are calibrated on one published H100
  step-cost model (reproduced, in sample), and the one out-of-sample check is an MTP run in
  FP8 (`GPU_CHECK`, the figures `tests/unit/core/test_roofline.py` computes); no draft-free
  method was checked on a GPU, so the error is unknown;
- `--costs` measured by the engine on the target: measured, the error of the engine's own
  step-cost estimates not quantified (the exported costs carry no spread).

A speedup is tau * t_none / t_spec, a ratio of two step costs at the same batch, so a relative
step-cost error e moves it at worst by (1 + e) / (1 - e) either way (`band_factor`): the bootstrap
interval over requests, widened by that factor, is the model band (`model_band`). A band that
straddles 1.0 (`straddles`) does not say whether speculation pays.

Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from vllm_specdec_plugin.core.roofline import Hardware, ModelShape, count_parameters, step_seconds

CPU_FIT_STEPS_MS = {1: 15.3421, 4: 14.6101, 16: 22.3071, 32: 32.3790}
"""The steps the `cpu` row was fitted to: benchmarks/results/schedule-switchback.json,
open_ended cells with arms [k0, k0] (SmolLM2-135M bf16 on this project's 2-core VM), step
milliseconds = concurrency / tokens per second (the two arms' mean), by concurrency."""
CPU_FIT_CONTEXT = 123
"""Those cells' mean context: prompts of 43 tokens and 160 output tokens, half of them cached."""
SMOLLM2_135M: dict[str, Any] = dict(layers=30, hidden=576, heads=9, kv_heads=3, head_dim=64,
                                    intermediate=1536, vocab=49152, tied=True)
"""HuggingFaceTB/SmolLM2-135M's config.json sizes."""
GPU_CHECK = ("in-sample calibration only (SpecDecode-Bench's H100 step-cost fit for "
             "Llama-3.1-8B, reproduced within 0.1%); one out-of-sample check (vLLM RFC #48627, "
             "MTP K=3, FP8, H100 NVL): -2.4% at batch 30, +34% at batch 128; no draft-free "
             "method was checked on a GPU")
"""What the GPU rows' error rests on (docs/whatif.md, "The GPU prior against published
figures"; the figures are `tests/unit/core/test_roofline.py`'s)."""
MEASURED_NOTE = ("measured on the target by the engine's controller; the error of its "
                 "step-cost estimates is not quantified (the exported costs carry no spread)")
NEAREST_NOTE = ("no prior on this platform: the nearest measured bucket's cost, scaled by "
                "rows; its error is not quantified")
ASYNC_NOT_PRICED = ("async scheduling (a plain engine runs it there and a speculating one does "
                    "not; the host work it hides is not known)")
"""Added to `NOT_PRICED` where the target's async scheduling has no price
(`whatif/drafter.async_scheduling`: rbln)."""
NOT_PRICED = (
    "prefill interference (a new request's prefill shares the steps of the running batch)",
    "the per-batch schedule (a fixed k is replayed at every batch size)")
"""What the predicted speedups leave out, whatever priced the steps."""


@dataclass(frozen=True)
class CurveError:
    """The model error of one pricing source."""

    priced_by: str
    """The hardware row's name, "measured" (`--costs`) or "nearest measured" (rbln)."""
    error: float | None
    """Relative step-cost error (the largest residual's size); None: unknown."""
    note: str
    """What the figure rests on, or why there is none."""

    def band(self, low: float, high: float) -> tuple[float | None, float | None]:
        """The bootstrap interval widened by the model error (None, None: unknown)."""
        if self.error is None:
            return None, None
        return model_band(low, high, self.error)


def band_factor(error: float) -> float:
    """The most a relative step-cost error `error` moves a ratio of two step costs."""
    if not 0.0 <= error < 1.0:
        raise ValueError(f"a relative step-cost error is in [0, 1), got {error}")
    return (1.0 + error) / (1.0 - error)


def model_band(low: float, high: float, error: float) -> tuple[float, float]:
    """[low, high] widened by `band_factor(error)` either way."""
    factor = band_factor(error)
    return low / factor, high * factor


def straddles(low: float | None, high: float | None) -> bool:
    """Whether a band leaves open whether speculation pays (1.0 strictly inside it)."""
    return low is not None and high is not None and low < 1.0 < high


def smollm2_shape() -> ModelShape:
    dims = SMOLLM2_135M
    total, active, _ = count_parameters(**dims)
    return ModelShape(total, active, dims["layers"], dims["hidden"], dims["heads"],
                      dims["kv_heads"], dims["head_dim"], dims["intermediate"], dims["vocab"],
                      tied_embeddings=True, name="SmolLM2-135M")


def cpu_residuals(row: Hardware) -> dict[int, float]:
    """`row`'s step model over the measured SmolLM2 steps, less 1, by concurrency."""
    shape = smollm2_shape()
    return {rows: step_seconds(shape, row, rows, 1, CPU_FIT_CONTEXT) / (ms / 1000.0) - 1.0
            for rows, ms in CPU_FIT_STEPS_MS.items()}


def _percent(value: float) -> str:
    return f"{value:+.1%}"


def curve_error(row: Hardware | None, measured: bool) -> CurveError:
    """The model error of a step priced by `measured` costs, else by `row`'s prior (None:
    no prior, the nearest measured bucket)."""
    if measured:
        return CurveError("measured", None, MEASURED_NOTE)
    if row is None:
        return CurveError("nearest measured", None, NEAREST_NOTE)
    if row.name != "cpu":
        return CurveError(row.name, None, f"unknown: {GPU_CHECK}")
    residuals = cpu_residuals(row)
    error = max(abs(r) for r in residuals.values())
    steps = ", ".join(f"{ms:.2f}" for ms in CPU_FIT_STEPS_MS.values())
    return CurveError("cpu", error, (
        f"in-sample, {len(residuals)} points: the largest of the cpu row's residuals "
        f"{', '.join(_percent(r) for r in residuals.values())} at batch "
        f"{', '.join(map(str, residuals))} against the SmolLM2-135M steps it was fitted to "
        f"({steps} ms)"))

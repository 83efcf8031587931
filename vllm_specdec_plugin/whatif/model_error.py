"""What priced each predicted batch size, with its model error, and which batches the KV cache
holds: the per-batch facts beside the speedups (`run.py` computes them, `render.py` shows them).

Per batch size: the source that priced it (`--costs`' measured bucket, else the prior's row,
else on rbln the nearest measured bucket) and that source's `core/curve_error.CurveError`; the
bootstrap interval over requests (`low`, `high`) widened by a known model error is the model
band (`model_low`, `model_high`). A batch above the KV capacity of the row's GPU
(`core/kv_capacity.py`) is not predicted: `fits` false, no speedup.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from vllm_specdec_plugin.core.curve_error import NOT_PRICED, CurveError, curve_error, straddles
from vllm_specdec_plugin.core.kv_capacity import KvCapacity, kv_capacity
from vllm_specdec_plugin.core.speedup import Predicted
from vllm_specdec_plugin.core.step_cost import StepCostCurve, bucket

STRADDLE_MARK = "?"
NOT_FIT_CELL = "KV>"


def batch_errors(row: Any, curve: StepCostCurve, batches: Sequence[int]
                 ) -> dict[int, CurveError]:
    """Per batch size the model error of what priced it: a measured bucket, else `row`'s prior
    (None: no prior; the nearest measured bucket)."""
    return {b: curve_error(row, bucket(b) in curve.measured) for b in batches}


def capacity_for(row: Any, shape: Any, mean_tokens: float, k: int
                 ) -> tuple[KvCapacity | None, str]:
    """The KV capacity of one GPU of `row` for `shape` at requests of `mean_tokens` (prompt and
    completion) + k + 1 tokens, or None and why it is not checked."""
    if row is None:
        return None, "KV capacity not checked: no hardware row (rbln)"
    if row.memory_gib is None:
        return None, (f"KV capacity not checked on {row.name} (vLLM's VLLM_CPU_KVCACHE_SPACE "
                      "sizes a CPU's KV cache)")
    if shape is None:
        return None, "KV capacity not checked: the checkpoint's config.json gives no shape"
    tokens = max(1, math.ceil(mean_tokens)) + k + 1
    return kv_capacity(shape, row.memory_gib, tokens), ""


def capacity_lines(capacity: KvCapacity | None, note: str, row: str, model: str,
                   batches: Sequence[int]) -> list[str]:
    """One line: nothing fits, or which batch sizes do not fit (none: no line)."""
    if capacity is None:
        return [note] if note and any(b > 1 for b in batches) else []
    gpu = (f"one {row} ({capacity.memory_gib:g} GiB x {capacity.gpu_memory_utilization:g}, "
           f"{capacity.reserve_gib:g} GiB reserved; tensor parallelism not modelled)")
    if not capacity.weights_fit:
        return [f"the weights of {model} ({capacity.weights_gib:.1f} GiB) do not fit {gpu}: "
                "nothing predicted"]
    if capacity.requests < 1:
        return [f"not one request of ~{capacity.tokens_per_request:,} tokens fits the KV cache "
                f"of {gpu} with {model} (weights {capacity.weights_gib:.1f} GiB): nothing "
                "predicted"]
    if all(capacity.fits(b) for b in batches):
        return []
    return [f"batch sizes above {capacity.requests:,} requests of ~"
            f"{capacity.tokens_per_request:,} tokens do not fit the KV cache of {gpu} with "
            f"{model} (weights {capacity.weights_gib:.1f} GiB): not predicted ({NOT_FIT_CELL})"]


def capacity_json(capacity: KvCapacity | None, note: str) -> dict[str, Any]:
    if capacity is None:
        return {"checked": False, "note": note}
    return {"checked": True, "requests": capacity.requests,
            "tokens_per_request": capacity.tokens_per_request,
            "memory_gib": capacity.memory_gib,
            "gpu_memory_utilization": capacity.gpu_memory_utilization,
            "weights_gib": capacity.weights_gib, "reserve_gib": capacity.reserve_gib,
            "kv_gib": capacity.kv_gib, "weights_fit": capacity.weights_fit,
            "note": "one GPU: tensor parallelism not modelled"}


def predicted_json(predicted: Sequence[Predicted], batches: Sequence[int],
                   errors: dict[int, CurveError], capacity: KvCapacity | None
                   ) -> list[dict[str, Any]]:
    """Per batch size: the speedup and its bootstrap interval over requests (`low`, `high`),
    what priced it and its model error, the model band (`model_low`, `model_high`: the
    bootstrap interval widened by the model error; null where it is unknown), and whether the
    KV cache holds it (`fits`; if not, no speedup)."""
    by_batch = {p.batch: p for p in predicted}
    out = []
    for b in batches:
        error, p = errors[b], by_batch.get(b)
        low, high = error.band(p.low, p.high) if p is not None else (None, None)
        out.append({
            "batch": b, "speedup": p.speedup if p else None, "low": p.low if p else None,
            "high": p.high if p else None, "priced_by": error.priced_by,
            "model_error": error.error, "model_error_note": error.note,
            "model_low": low, "model_high": high, "fits": p is not None,
            "kv_capacity_requests": None if capacity is None else capacity.requests})
    return out


def cell(p: Predicted | None, error: CurveError, ratio: str) -> str:
    """A table cell: the speedup, marked where its model band straddles 1.0; `KV>` where the
    batch does not fit."""
    if p is None:
        return NOT_FIT_CELL
    return ratio + (STRADDLE_MARK if straddles(*error.band(p.low, p.high)) else "")


def _batches(batches: Sequence[int]) -> str:
    return "batch " + ", ".join(map(str, batches))


def error_lines(errors: dict[int, CurveError], marked: bool,
                not_priced: tuple[str, ...] = NOT_PRICED) -> list[str]:
    """One line per source that priced a batch size: its model error or why it is unknown;
    the legend of the straddle mark where a cell carries it; what is not priced."""
    by_source: dict[CurveError, list[int]] = {}
    for b, error in errors.items():
        by_source.setdefault(error, []).append(b)
    lines = []
    for error, batches in by_source.items():
        what = ("the measured buckets" if error.priced_by == "measured" else
                "the nearest measured bucket" if error.priced_by == "nearest measured" else
                f"the {error.priced_by} prior")
        if error.error is None:
            lines.append(f"model error of {what} ({_batches(batches)}): {error.note}")
            continue
        factor = (1 + error.error) / (1 - error.error)
        lines.append(f"model error of {what} ({_batches(batches)}): +/-{error.error:.1%} per "
                     f"step ({error.note}); the model band widens the 90% interval over "
                     f"requests by x{factor:.2f} either way (--json model_low, model_high)")
    if marked:
        lines.append(f"  {STRADDLE_MARK}: the model band straddles 1.0 (whether speculation "
                     "pays there is within the model's error)")
    lines.append("not priced: " + "; ".join(not_priced))
    return lines

"""The hardware table (`vllm_specdec_plugin/data/hardware.yaml`) -> `core.roofline.Hardware` rows.

Read through the bounded YAML loader (`inputs/parsers.py`) and checked row by row: every number
finite and in its range, every number with a non-empty source (a figure without its source is
refused: the table's point is that each prior can be traced), names unique. The GPU rows take
their efficiencies, overhead and switch share from `gpu_defaults` unless they give their own;
the `cpu` row gives all of its own. Each GPU row gives its `memory_gib` (for the KV capacity)
and `host_overhead_s` (the host's share of `overhead_s`, which async scheduling hides) with
their sources; the `cpu` row gives neither (vLLM's `VLLM_CPU_KVCACHE_SPACE` sizes a CPU's cache,
and its CPU platform runs no async scheduling).
`cpu_prior` is the roofline prior for this project's CPU
machine kind, `roofline_curve` on the `cpu` row.
"""

from __future__ import annotations

import math
from functools import lru_cache
from importlib import resources
from typing import Any

from vllm_specdec_plugin.core.errors import SpecDecodeConfigError, quote_value
from vllm_specdec_plugin.core.roofline import (
    BATCHES,
    Hardware,
    ModelShape,
    roofline_curve,
)
from vllm_specdec_plugin.core.step_cost import StepCostCurve
from vllm_specdec_plugin.inputs.parsers import load_yaml

BUILTIN_HARDWARE = "vllm_specdec_plugin/data/hardware.yaml"
PEAKS = ("memory_bandwidth_gbs", "bf16_tflops", "fp8_tflops")
TUNED = ("bandwidth_efficiency", "flops_efficiency", "fp8_flops_efficiency", "overhead_s",
         "switch_share")
# [low, high] for each number: a peak is positive and far above nothing, an efficiency a
# fraction above nothing, an overhead under a second, a share a fraction.
RANGES = {"memory_bandwidth_gbs": (1e-3, 1e6), "bf16_tflops": (1e-6, 1e6),
          "fp8_tflops": (1e-6, 1e6), "bandwidth_efficiency": (1e-3, 1.0),
          "flops_efficiency": (1e-3, 1.0), "fp8_flops_efficiency": (1e-3, 1.0),
          "overhead_s": (0.0, 1.0), "switch_share": (0.0, 1.0), "memory_gib": (1.0, 4096.0),
          "host_overhead_s": (0.0, 1.0)}
GPU_ONLY = ("memory_gib", "host_overhead_s")
"""Read on GPU rows only: the cpu row has no KV capacity check (vLLM's VLLM_CPU_KVCACHE_SPACE
sizes it) and no async scheduling (vLLM's CPU platform turns it off)."""
FIX = "fix the hardware table"


def _refuse(source: str, where: str, problem: str) -> SpecDecodeConfigError:
    return SpecDecodeConfigError(f"{source}: {where} {problem}; {FIX}")


def _mapping(value: Any, source: str, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _refuse(source, where, f"must be a mapping, got {type(value).__name__}")
    return value


def _number(row: dict[str, Any], key: str, source: str, where: str) -> float:
    value = row.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _refuse(source, f"{where}.{key}",
                      f"must be a number, got {quote_value(value)}")
    low, high = RANGES[key]
    if not (math.isfinite(value) and low <= value <= high):
        raise _refuse(source, f"{where}.{key}", f"{value} is outside [{low}, {high}]")
    return float(value)


def _row(row: Any, defaults: dict[str, Any], source: str, where: str,
         gpu: bool = True) -> Hardware:
    row = _mapping(row, source, where)
    name = row.get("name")
    if not isinstance(name, str) or not name or name != name.strip().lower():
        raise _refuse(source, f"{where}.name", f"must be a lower-case name, got "
                      f"{quote_value(name)}")
    where = f"{where} ({name})"
    merged = {**defaults, **{k: v for k, v in row.items() if k != "sources"}}
    sources = {**_mapping(defaults.get("sources", {}), source, "gpu_defaults.sources"),
               **_mapping(row.get("sources", {}), source, f"{where}.sources")}
    values = {key: _number(merged, key, source, where)
              for key in (*PEAKS, *TUNED) if key != "fp8_tflops"}
    # null: no FP8 units (W8A16 runs at the BF16 rate)
    fp8 = None if merged.get("fp8_tflops") is None else _number(merged, "fp8_tflops", source,
                                                                 where)
    for key in GPU_ONLY:
        if gpu:
            values[key] = _number(merged, key, source, where)
        elif key in merged:
            raise _refuse(source, f"{where}.{key}", "is not read on the cpu row (vLLM's "
                          "VLLM_CPU_KVCACHE_SPACE sizes a CPU's KV cache, and its CPU "
                          "platform runs no async scheduling); remove it")
    if gpu and values["host_overhead_s"] > values["overhead_s"]:
        raise _refuse(source, f"{where}.host_overhead_s", f"{values['host_overhead_s']} is "
                      f"more than overhead_s {values['overhead_s']}, of which it is a part")
    keys = (*PEAKS, *TUNED, *(GPU_ONLY if gpu else ()))
    for key in keys:
        text = sources.get(key)
        if not isinstance(text, str) or not text.strip():
            raise _refuse(source, f"{where}.sources.{key}", "is missing: every number needs "
                          "its source")
    return Hardware(name=name, bandwidth_gbs=values["memory_bandwidth_gbs"],
                    bf16_tflops=values["bf16_tflops"], fp8_tflops=fp8,
                    bandwidth_efficiency=values["bandwidth_efficiency"],
                    flops_efficiency=values["flops_efficiency"],
                    fp8_flops_efficiency=values["fp8_flops_efficiency"],
                    overhead_s=values["overhead_s"], switch_share=values["switch_share"],
                    title=str(row.get("title") or name),
                    sources={k: " ".join(str(sources[k]).split()) for k in keys},
                    memory_gib=values.get("memory_gib"),
                    host_overhead_s=values.get("host_overhead_s", 0.0))


def parse_hardware_table(text: str, source: str) -> dict[str, Hardware]:
    """The table in `text` (YAML) by row name; every refusal names `source`, the row and key."""
    document = _mapping(load_yaml(text, f"hardware table {source}", FIX), source, "the table")
    defaults = _mapping(document.get("gpu_defaults"), source, "gpu_defaults")
    gpus = document.get("gpus")
    if not isinstance(gpus, list) or not gpus:
        raise _refuse(source, "gpus", "must be a non-empty list of rows")
    rows = [_row(row, defaults, source, f"gpus[{i}]") for i, row in enumerate(gpus)]
    rows.append(_row(document.get("cpu"), {}, source, "cpu", gpu=False))
    table: dict[str, Hardware] = {}
    for row in rows:
        if row.name in table:
            raise _refuse(source, f"row {row.name}", "appears twice")
        table[row.name] = row
    return table


@lru_cache(maxsize=1)
def load_hardware() -> dict[str, Hardware]:
    """The package's table (read once per process)."""
    text = resources.files("vllm_specdec_plugin").joinpath("data/hardware.yaml").read_text()
    return parse_hardware_table(text, BUILTIN_HARDWARE)


def find_hardware(name: str, what: str = "--gpu") -> Hardware:
    """The row `name` (case and surrounding spaces aside), else one line naming the rows."""
    table = load_hardware()
    found = table.get(name.strip().lower())
    if found is None:
        raise SpecDecodeConfigError(
            f"{what} {quote_value(name)} is not in the hardware table ({BUILTIN_HARDWARE}); "
            f"give one of: {', '.join(table)}")
    return found


def cpu_prior(shape: ModelShape, context: int, method: str = "ngram",
              batches: tuple[int, ...] = BATCHES) -> StepCostCurve:
    """The prior for this project's CPU machine kind: the roofline on the `cpu` row."""
    return roofline_curve(shape, find_hardware("cpu"), context, method, batches)

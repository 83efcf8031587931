"""The model error of each pricing source (`core/curve_error.py`): the band arithmetic, the
straddle mark, the cpu row's error computed from the steps it was fitted to (those steps equal
the result file's), and the GPU rows' and measured costs' "unknown"."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vllm_specdec_plugin.core.curve_error import (
    CPU_FIT_STEPS_MS,
    GPU_CHECK,
    MEASURED_NOTE,
    band_factor,
    cpu_residuals,
    curve_error,
    model_band,
    straddles,
)
from vllm_specdec_plugin.inputs.hardware import find_hardware

ROOT = Path(__file__).resolve().parents[3]


def test_band_arithmetic():
    assert band_factor(0.0) == 1.0
    assert band_factor(0.1) == pytest.approx(1.1 / 0.9)
    low, high = model_band(1.2, 1.5, 0.1)
    assert low == pytest.approx(1.2 * 0.9 / 1.1) and high == pytest.approx(1.5 * 1.1 / 0.9)
    for bad in (-0.1, 1.0):
        with pytest.raises(ValueError, match=r"in \[0, 1\)"):
            band_factor(bad)


def test_straddle_means_one_strictly_inside():
    assert straddles(0.95, 1.05) and straddles(*model_band(1.05, 1.1, 0.0845))
    assert not straddles(1.01, 1.3) and not straddles(0.5, 0.99) and not straddles(1.0, 1.2)
    assert not straddles(None, None)


def test_the_cpu_fit_steps_are_the_result_files():
    cells = json.loads((ROOT / "benchmarks/results/schedule-switchback.json").read_text())
    measured = {}
    for cell in cells["cells"]:
        if cell["arms"] == ["k0", "k0"] and cell["workload"] == "open_ended":
            arms = cell["cell"]
            measured[cell["concurrency"]] = 1000 * cell["concurrency"] * 2 / (
                arms["arm0"]["tokens_per_s"] + arms["arm1"]["tokens_per_s"])
    assert sorted(measured) == sorted(CPU_FIT_STEPS_MS)
    for rows, ms in CPU_FIT_STEPS_MS.items():
        assert ms == pytest.approx(measured[rows], abs=1e-4)


def test_the_cpu_rows_error_is_its_largest_residual():
    cpu = find_hardware("cpu")
    residuals = cpu_residuals(cpu)
    assert [round(100 * r, 1) for r in residuals.values()] == [-8.4, 8.1, 2.0, -1.0]
    error = curve_error(cpu, measured=False)
    assert error.priced_by == "cpu" and error.error == max(abs(r) for r in residuals.values())
    assert error.note.startswith("in-sample, 4 points") and "-8.4%, +8.1%, +2.0%, -1.0%" in (
        error.note)
    assert error.band(1.0, 1.1) == model_band(1.0, 1.1, error.error)


def test_gpu_rows_and_measured_costs_have_no_figure():
    gpu = curve_error(find_hardware("l4"), measured=False)
    assert gpu.priced_by == "l4" and gpu.error is None and gpu.note == f"unknown: {GPU_CHECK}"
    assert gpu.band(0.9, 1.1) == (None, None)
    measured = curve_error(find_hardware("cpu"), measured=True)
    assert (measured.priced_by, measured.error, measured.note) == ("measured", None,
                                                                   MEASURED_NOTE)
    assert curve_error(None, measured=False).priced_by == "nearest measured"

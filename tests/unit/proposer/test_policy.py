"""The adaptive proposer's policy and row tracking, without an engine (fast).

The engine-level behaviour (tokens, counters, mixed sampling) is in tests/test_adaptive.py.
"""

from __future__ import annotations

import importlib
import random
from types import SimpleNamespace

import numpy as np
import pytest

from vllm_specdec_plugin.proposer.policy import (
    Acceptance,
    StepCost,
    StepCostModel,
    outcome,
    plan_draft_lengths,
)

CPU_LIKE = StepCost(fixed=0.055, per_token=0.0035, switch=0.002)  # SmolLM2 on 2 cores


def test_outcome_counts_the_accepted_prefix_then_one_miss():
    assert outcome([1, 2, 3], [1, 2, 9]) == (2, 1)
    assert outcome([1, 2, 3], [1, 2, 3, 4]) == (3, 0)   # all accepted, bonus after
    assert outcome([1, 2, 3], [1]) == (1, 0)            # only one position verified
    assert outcome([5], [7]) == (0, 1)                  # a shadow candidate that missed
    assert outcome([], [7]) == (0, 0)


def test_acceptance_decays_towards_recent_outcomes():
    row = Acceptance()
    assert row.alpha((0.5, 0.7), 2.0) == (0.5, 0.7)
    for _ in range(10):
        row.observe(5, 0, 0.85)
    first, later = row.alpha((0.5, 0.7), 2.0)
    assert first > 0.8 and later > 0.9
    for _ in range(6):
        row.observe(0, 1, 0.85)
    assert row.alpha((0.5, 0.7), 2.0)[0] < 0.5 < first


def test_a_copy_run_is_told_apart_from_a_lucky_first_token():
    copying, lucky = Acceptance(), Acceptance()
    for _ in range(8):
        copying.observe(6, 0, 0.85)
        lucky.observe(1, 1, 0.85)
    assert copying.alpha((0.5, 0.7), 2.0)[1] > 0.9 > 0.3 > lucky.alpha((0.5, 0.7), 2.0)[1]


def test_batch_one_drafts_long_when_accepting():
    lengths = plan_draft_lengths([16], [(0.9, 0.9)], rows=1, cost=CPU_LIKE)
    assert lengths[0] >= 10


def test_saturated_batch_of_open_ended_rows_drafts_nothing():
    rows = 32
    lengths = plan_draft_lengths([16] * rows, [(0.35, 0.35)] * rows, rows=rows, cost=CPU_LIKE)
    assert sum(lengths) == 0


def test_saturated_batch_keeps_drafting_for_rows_that_copy():
    alphas = [(0.97, 0.97)] * 4 + [(0.3, 0.3)] * 28
    lengths = plan_draft_lengths([16] * 32, alphas, rows=32, cost=CPU_LIKE)
    assert all(length >= 3 for length in lengths[:4])
    assert sum(lengths[4:]) == 0


def test_more_load_means_shorter_drafts():
    at = {rows: plan_draft_lengths([16] * rows, [(0.8, 0.8)] * rows, rows, CPU_LIKE)[0]
          for rows in (1, 4, 16, 32)}
    assert at[1] >= at[4] >= at[16] >= at[32]
    assert at[1] > at[32]


def test_no_cost_estimate_or_no_candidate_means_no_draft():
    assert plan_draft_lengths([8], [(0.99, 0.99)], rows=1, cost=None) == [0]
    assert plan_draft_lengths([0, 0], [(0.99, 0.99)] * 2, rows=2, cost=CPU_LIKE) == [0, 0]


def test_switch_cost_stops_a_lone_marginal_draft():
    costly = StepCost(fixed=0.01, per_token=0.001, switch=0.01)
    assert plan_draft_lengths([1], [(0.5, 0.5)], rows=8, cost=costly) == [0]


def test_cost_model_recovers_linear_step_time():
    model = StepCostModel()
    rng = random.Random(0)
    for _ in range(400):
        rows = rng.choice([1, 4, 16, 32])
        drafted = rng.randrange(0, 3 * rows)
        seconds = 0.05 + 0.003 * (rows + drafted) + (0.002 if drafted else 0.0)
        model.observe(rows + drafted, drafted > 0, seconds * (1 + rng.uniform(-0.03, 0.03)))
    cost = model.estimate()
    assert cost is not None
    assert cost.fixed == pytest.approx(0.05, rel=0.15)
    assert cost.per_token == pytest.approx(0.003, rel=0.15)


def test_cost_model_without_variation_falls_back_on_the_prior_shape():
    model = StepCostModel()
    for _ in range(50):
        model.observe(32, False, 0.1)
    cost = model.estimate()
    assert cost is not None and cost.seconds(32, False) == pytest.approx(0.1, rel=0.05)
    assert cost.per_token > 0


# -- the proposer class itself, driven with the arrays the model runner passes ---------------

def proposer(rows: int = 4, k: int = 8):
    from vllm_specdec_plugin.adaptive import AdaptiveProposer

    config = SimpleNamespace(
        speculative_config=SimpleNamespace(num_speculative_tokens=k),
        model_config=SimpleNamespace(max_model_len=256),
        scheduler_config=SimpleNamespace(max_num_seqs=rows))
    return AdaptiveProposer(config)


def put(token_ids, num_tokens, row, tokens):
    token_ids[row, :len(tokens)] = tokens
    num_tokens[row] = len(tokens)


def test_row_reused_by_another_request_starts_a_fresh_history():
    drafter = proposer()
    token_ids = np.zeros((4, 256), dtype=np.int32)
    num_tokens = np.zeros(4, dtype=np.int32)
    first = [1, 2, 3, 4, 5, 6, 7, 8] * 4
    put(token_ids, num_tokens, 0, first)
    drafter.propose([[first[-1]]], num_tokens, token_ids)
    for _ in range(5):  # the same request goes on: one request seen
        n = int(num_tokens[0])
        token = first[n % 8]
        put(token_ids, num_tokens, 0, list(token_ids[0, :n]) + [token])
        drafter.propose([[token]], num_tokens, token_ids)
    assert drafter.stats["requests"] == 1
    other = [9, 10, 11, 12] * 3
    put(token_ids, num_tokens, 0, other)  # row 0 now holds a new request
    drafter.propose([[other[-1]]], num_tokens, token_ids)
    assert drafter.stats["requests"] == 2
    state = drafter._states[(token_ids[0, :8].tobytes(), len(other))][0]
    assert state.acceptance["ngram"] == Acceptance()


def test_internal_error_drafts_nothing_and_is_logged_once():
    drafter = proposer()
    logged = []
    drafter._logger = SimpleNamespace(exception=lambda msg, *a: logged.append(msg),
                                      debug=lambda *a: None)
    token_ids = np.zeros((4, 256), dtype=np.int32)
    num_tokens = np.array([10, 0, 0, 0], dtype=np.int32)
    bad = [[1], [2]]  # two rows sampled, but the arrays disagree: must not raise
    assert drafter.propose(bad, num_tokens[:1], token_ids) == [[], []]
    assert drafter.propose(bad, num_tokens[:1], token_ids) == [[], []]
    assert drafter.stats["errors"] == 2
    assert len(logged) == 1 and "adaptive proposer failed" in logged[0]


# -- selection: VLLM_SPECDEC_FALLBACK=adaptive ------------------------------------------------

VLLM_032 = ("0.32.0", {"ngram", "suffix", "eagle", "eagle3", "medusa", "mtp", "draft_model",
                       "ngram_gpu", "custom_class"}, {"eagle", "eagle3", "mtp", "draft_model"})


def opted_in(**kwargs):
    from vllm_specdec_plugin.core.types import Annotation, KaitoRequest

    return KaitoRequest(Annotation("true", "test"), **kwargs)


def run(kaito, caps, **engine):
    from vllm_specdec_plugin.core.decide import decide
    from vllm_specdec_plugin.core.types import EngineRequest
    from vllm_specdec_plugin.inputs.presets import builtin_preset_table

    engine.setdefault("model", "microsoft/Phi-4-mini-instruct")
    return decide(kaito, EngineRequest(**engine), caps, builtin_preset_table())


def test_adaptive_fallback_is_selected_by_name_and_only_then():
    from conftest import release_caps

    from vllm_specdec_plugin.adaptive import AdaptiveProposer
    from vllm_specdec_plugin.core.methods import ADAPTIVE_CLASS_PATH as CLASS_PATH
    from vllm_specdec_plugin.core.methods import ADAPTIVE_FALLBACK, FALLBACKS, NGRAM_FALLBACK

    caps = release_caps("cpu", *VLLM_032)
    rbln = release_caps("rbln", *VLLM_032)  # vllm-rbln's list has no custom_class
    decision = run(opted_in(fallback="adaptive"), caps)
    assert decision.enabled and decision.source == "adaptive-fallback"
    assert decision.speculative_config == dict(ADAPTIVE_FALLBACK)
    assert decision.async_scheduling is False
    module, name = ADAPTIVE_FALLBACK["model"].rsplit(".", 1)
    assert ADAPTIVE_FALLBACK["model"] == CLASS_PATH
    assert getattr(importlib.import_module(module), name) is AdaptiveProposer
    assert "num_speculative_tokens_per_batch_size" not in decision.speculative_config
    assert "adaptive" in FALLBACKS and next(iter(FALLBACKS)) == "ngram"
    assert run(opted_in(), caps).speculative_config == dict(NGRAM_FALLBACK)  # default unchanged
    # A user config and a tuned preset are untouched by the fallback setting.
    user = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 2}
    assert run(opted_in(fallback="adaptive"), caps,
               speculative_config=user).speculative_config == user
    tuned = run(opted_in(fallback="adaptive"), caps, model="Qwen/Qwen3.5-4B")
    assert tuned.source == "tuned-preset"
    # RBLN (vllm-rbln has no custom_class): refused, naming the setting.
    refused = run(opted_in(fallback="adaptive"), rbln)
    assert not refused.enabled
    assert "VLLM_SPECDEC_FALLBACK=adaptive" in refused.errors[0]
    assert "custom_class" in refused.errors[0]

"""Exact replay (`whatif/replay.py`): hand-built requests with known answers, the n-gram and
suffix replays against vLLM's own proposer classes step by step, the suffix tree's
cross-request cache, k and lookup changes, the adaptive proposer's replay, bad configs, speed.

vLLM's and arctic-inference's real code throughout; no engine is started."""

from __future__ import annotations

import sys
import tracemalloc
from collections.abc import Callable
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.examples import examples

from vllm_specdec_plugin.core.errors import SpecDecodeConfigError
from vllm_specdec_plugin.proposer.proposer import AdaptiveProposer
from vllm_specdec_plugin.whatif import replay as replay_module
from vllm_specdec_plugin.whatif.replay import replay, resolve
from vllm_specdec_plugin.whatif.types import MethodConfig, ReplayRequest, ReplayResult

pytest.importorskip("vllm.v1.spec_decode.ngram_proposer")


def request(prompt: list[int] | np.ndarray, completion: list[int] | np.ndarray,
            line: int = 1) -> ReplayRequest:
    return ReplayRequest(np.asarray(prompt, dtype=np.int32),
                         np.asarray(completion, dtype=np.int32), line)


def ngram(k: int, low: int | None = None, high: int | None = None) -> MethodConfig:
    return MethodConfig("ngram", k, low, high)


def consistent(result: ReplayResult, requests: list[ReplayRequest]) -> None:
    """What holds for every method: each step emits 1 + accepted tokens (the last one possibly
    one fewer, when it accepted every remaining token), drafts fit k, positions add up."""
    n = np.array([len(r.completion_ids) for r in requests])
    assert result.output_tokens.tolist() == n.tolist()
    assert (result.accepted <= result.drafted).all()
    assert (result.drafted <= result.config.k * result.drafting_steps).all()
    assert (result.drafting_steps <= result.steps).all()
    assert int(result.accepted_by_position.sum()) == int(result.accepted.sum())
    assert (np.diff(result.accepted_by_position) <= 0).all()  # position i+1 needs position i
    over = result.steps + result.accepted - (n - 1)
    assert ((over == 0) | (over == 1)).all()


# -- hand-built requests with known answers ---------------------------------------------------

PROMPT = list(range(100, 140))  # 40 distinct tokens


def test_a_completion_that_copies_the_prompt_has_every_draft_accepted_up_to_its_end():
    # n-grams of 2: the first step's context ends "139 100", found nowhere, so no draft; from
    # then on every draft is the prompt's next 4 tokens, the completion's too
    result = replay([request(PROMPT, PROMPT)], ngram(4, 2, 2), max_model_len=1024)
    # g = 1 (no draft), 2, 7, 12, ..., 37: the last draft's 4th token is past the end (index
    # 40): counted rejected, and the step emits the 3 tokens left
    assert result.steps.tolist() == [9]
    assert result.drafting_steps.tolist() == [8]
    assert result.drafted.tolist() == [32]
    assert result.accepted.tolist() == [31]
    assert result.accepted_by_position.tolist() == [8, 8, 8, 7]
    assert result.tokens_per_step == pytest.approx(39 / 9)
    consistent(result, [request(PROMPT, PROMPT)])


def test_the_last_step_counts_only_the_tokens_before_the_completions_end():
    # 39 tokens: the last draft (at g = 37) has 2 positions inside, 2 past the end
    result = replay([request(PROMPT, PROMPT[:39])], ngram(4, 2, 2), max_model_len=1024)
    assert result.steps.tolist() == [9]
    assert result.drafted.tolist() == [32]
    assert result.accepted.tolist() == [30]
    assert result.accepted_by_position.tolist() == [8, 8, 7, 7]
    # 38 tokens: the last draft (g = 37) has 1 inside: accepted, the step emits 1 token
    short = replay([request(PROMPT, PROMPT[:38])], ngram(4, 2, 2), max_model_len=1024)
    assert short.accepted.tolist() == [29] and short.steps.tolist() == [9]


def test_an_unrelated_completion_has_no_draft_accepted():
    # the one n-gram that repeats ("5 6") drafts the prompt's "7 8 5 6"; the completion goes on
    # with 100: rejected; nothing after it repeats
    completion = [5, 6, *range(1000, 1030)]
    result = replay([request([5, 6, 7, 8], completion)], ngram(4, 2, 2), max_model_len=256)
    assert result.drafted.tolist() == [4] and result.drafting_steps.tolist() == [1]
    assert result.accepted.tolist() == [0]
    assert result.steps.tolist() == [len(completion) - 1]
    assert result.tokens_per_step == 1.0


def test_max_model_len_clips_drafts_and_stops_the_request_as_the_engine_does():
    # context + draft stays within max_model_len - 1: at 45 tokens of 48 one more token fits
    result = replay([request(PROMPT, PROMPT)], ngram(4, 2, 2), max_model_len=48)
    assert result.output_tokens.tolist() == [8]  # cut where prompt + completion reaches 48
    assert any("cut" in note for note in result.notes)
    # g = 1 (no draft), 2: 4 drafted, 4 accepted (g = 7: context 47, no room for a draft)
    assert result.drafted.tolist() == [4] and result.accepted.tolist() == [4]
    assert result.steps.tolist() == [3]
    skipped = replay([request(PROMPT, PROMPT), request([], [1]), request([1], [])], ngram(4),
                     max_model_len=40)
    assert skipped.requests == 0 and skipped.steps.size == 0
    assert any(note.startswith("3 request(s) skipped") for note in skipped.notes)


# -- vLLM's own proposer classes, step by step -------------------------------------------------

Propose = Callable[[int, int, int, list[int], np.ndarray], list[int]]
"""(request index, prompt length, context length, the last step's tokens, token row) -> draft."""


def served_alone(requests: list[ReplayRequest], k: int, max_model_len: int, propose: Propose
                 ) -> tuple[list[tuple[int, int, int, int]], list[int]]:
    """Each request served alone as the engine serves it: `propose` called after every step
    (the last one too, as the model runner does; that draft is thrown away) on the engine's
    token row, its draft clipped as vLLM's scheduler clips it. Per request (steps, drafting
    steps, drafted, accepted), and the accepted tokens by position."""
    out, by_position = [], [0] * k
    for index, req in enumerate(requests):
        prompt, completion = req.prompt_ids.tolist(), req.completion_ids.tolist()
        n = min(len(completion), max_model_len - len(prompt))
        row = np.zeros((1, max_model_len), dtype=np.int32)
        row[0, :len(prompt) + 1] = prompt + completion[:1]
        steps = drafting = drafted = accepted = 0
        g, emitted = 1, completion[:1]
        while True:
            length = len(prompt) + g
            draft = propose(index, len(prompt), length, emitted, row)
            if g >= n:
                break
            draft = draft[:max(0, max_model_len - 1 - length)]
            ok = 0
            while ok < len(draft) and g + ok < n and draft[ok] == completion[g + ok]:
                by_position[ok] += 1
                ok += 1
            steps, drafting = steps + 1, drafting + bool(draft)
            drafted, accepted = drafted + len(draft), accepted + ok
            emitted = completion[g:g + min(1 + ok, n - g)]
            row[0, length:length + len(emitted)] = emitted
            g += len(emitted)
        out.append((steps, drafting, drafted, accepted))
    return out, by_position


def columns(result: ReplayResult) -> tuple[list[tuple[int, int, int, int]], list[int]]:
    per_request = zip(result.steps.tolist(), result.drafting_steps.tolist(),
                      result.drafted.tolist(), result.accepted.tolist(), strict=True)
    return list(per_request), result.accepted_by_position.tolist()


tokens = st.lists(st.integers(0, 5), min_size=1, max_size=60)  # small vocabulary: repeats


@settings(derandomize=True, deadline=None, max_examples=examples(30))
@given(pairs=st.lists(st.tuples(tokens, tokens), min_size=1, max_size=3),
       k=st.integers(1, 6), low=st.integers(1, 3), extra=st.integers(0, 2),
       room=st.integers(0, 80))
def test_ngram_replay_equals_vllms_ngram_proposer(pairs, k, low, extra, room):
    from vllm.v1.spec_decode.ngram_proposer import NgramProposer

    requests = [request(p, c, i) for i, (p, c) in enumerate(pairs)]
    # some examples cut at max_model_len, so its clip of drafts is exercised
    max_model_len = max(len(p) for p, _ in pairs) + 1 + room
    theirs = NgramProposer(SimpleNamespace(
        speculative_config=SimpleNamespace(prompt_lookup_min=low, prompt_lookup_max=low + extra,
                                           num_speculative_tokens=k),
        model_config=SimpleNamespace(max_model_len=max_model_len),
        scheduler_config=SimpleNamespace(max_num_seqs=1),
        parallel_config=SimpleNamespace(tensor_parallel_size=1)))

    def propose(index: int, prompt_len: int, length: int, emitted: list[int],
                row: np.ndarray) -> list[int]:
        return theirs.propose(k, [emitted], np.array([length], np.int32), row)[0]

    result = replay(requests, ngram(k, low, low + extra), max_model_len=max_model_len)
    assert columns(result) == served_alone(requests, k, max_model_len, propose)


suffix_only = pytest.mark.skipif(not replay_module._suffix_available(),
                                 reason="arctic-inference is not installed")


@suffix_only
@settings(derandomize=True, deadline=None, max_examples=examples(15))
@given(pairs=st.lists(st.tuples(tokens, tokens), min_size=1, max_size=4),
       k=st.integers(1, 8), room=st.integers(0, 80))
def test_suffix_replay_equals_vllms_suffix_proposer(pairs, k, room):
    from vllm.config import SpeculativeConfig
    from vllm.v1.spec_decode.suffix_decoding import SuffixDecodingProposer

    requests = [request(p, c, i) for i, (p, c) in enumerate(pairs)]
    max_model_len = max(len(p) for p, _ in pairs) + 1 + room
    theirs = SuffixDecodingProposer(SimpleNamespace(
        speculative_config=SpeculativeConfig(method="suffix", num_speculative_tokens=k),
        model_config=SimpleNamespace(max_model_len=max_model_len)))

    def propose(index: int, prompt_len: int, length: int, emitted: list[int],
                row: np.ndarray) -> list[int]:
        batch = SimpleNamespace(  # the fields of vLLM's InputBatch its propose reads
            req_ids=[f"r{index}"], req_id_to_index={f"r{index}": 0}, token_ids_cpu=row,
            num_prompt_tokens=np.array([prompt_len]), num_tokens_no_spec=np.array([length]))
        return theirs.propose(k, batch, [emitted])[0]

    result = replay(requests, MethodConfig("suffix", k), max_model_len=max_model_len)
    assert columns(result) == served_alone(requests, k, max_model_len, propose)
    consistent(result, [request(r.prompt_ids, r.completion_ids[:o])
                        for r, o in zip(requests, result.output_tokens, strict=True)])


@suffix_only
def test_suffix_cross_request_cache_drafts_a_repeated_answer():
    rng = np.random.default_rng(3)
    prompt = rng.permutation(500)[:200]
    answer = 1000 + rng.permutation(500)[:120]  # nothing of it in the prompt
    same = [request(prompt, answer, 1), request(prompt, answer, 2)]
    result = replay(same, MethodConfig("suffix", 8), max_model_len=2048)
    assert result.drafted[0] == 0  # the first time, nothing to draft from
    assert result.drafted[1] > 50 and result.accepted[1] > 50
    assert result.steps[1] < result.steps[0] / 3
    consistent(result, same)
    assert result.resolved == {
        "method": "suffix", "num_speculative_tokens": 8, "suffix_decoding_max_tree_depth": 24,
        "suffix_decoding_max_spec_factor": 1.0, "suffix_decoding_min_token_prob": 0.1,
        "suffix_decoding_max_cached_requests": 10000}


# -- k and n-gram lookup ----------------------------------------------------------------------

def test_k_and_lookup_change_the_counts_as_expected():
    one = replay([request(PROMPT, PROMPT)], ngram(1, 2, 2), max_model_len=1024)
    # k = 1: g = 1 no draft, then 19 steps of 2 tokens (1 accepted + 1)
    assert (one.steps.tolist(), one.drafted.tolist(), one.accepted.tolist()) == (
        [20], [19], [19])
    assert one.accepted_by_position.tolist() == [19]
    eight = replay([request(PROMPT, PROMPT)], ngram(8, 2, 2), max_model_len=1024)
    assert eight.steps[0] < replay([request(PROMPT, PROMPT)], ngram(4, 2, 2),
                                   max_model_len=1024).steps[0]
    assert len(eight.accepted_by_position) == 8
    # repeats of 3 tokens only: found with n-grams of 2-3 ("1 2" drafts "3 50": 3 accepted),
    # never with 4-5
    prompt = [1, 2, 3, 50, 51, 52, 53]
    completion = [60, 1, 2, 3, 70, 71, 72, 73]
    found = replay([request(prompt, completion)], ngram(2, 2, 3), max_model_len=256)
    missed = replay([request(prompt, completion)], ngram(2, 4, 5), max_model_len=256)
    assert found.accepted.tolist() == [1] and found.drafted[0] >= 2
    assert missed.drafted.tolist() == [0] and missed.steps.tolist() == [7]


def test_resolve_gives_vllms_own_defaults():
    assert resolve(ngram(5, None, 4)) == {"method": "ngram", "num_speculative_tokens": 5,
                                          "prompt_lookup_min": 4, "prompt_lookup_max": 4}
    assert resolve(ngram(3)) == {"method": "ngram", "num_speculative_tokens": 3,
                                 "prompt_lookup_min": 5, "prompt_lookup_max": 5}
    assert resolve(ngram(3, 2, None))["prompt_lookup_max"] == 2
    assert resolve(MethodConfig("adaptive", 16)) == {
        "method": "custom_class", "model": "vllm_specdec_plugin.adaptive.AdaptiveProposer",
        "num_speculative_tokens": 16}


# -- adaptive ---------------------------------------------------------------------------------

def copying_traffic(count: int, prompt_len: int = 300, answer_len: int = 120, seed: int = 0
                    ) -> list[ReplayRequest]:
    """Prompts with a repeated stretch; answers copying stretches of their prompt between new
    tokens."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(count):
        base = rng.integers(0, 8000, prompt_len * 2 // 5)
        prompt = np.concatenate([base, rng.integers(0, 8000, prompt_len // 5),
                                 base[:len(base) // 2],
                                 rng.integers(0, 8000, prompt_len // 5)])
        parts, size = [], 0
        while size < answer_len:
            start = int(rng.integers(0, len(prompt) - 40))
            piece = (prompt[start:start + int(rng.integers(5, 40))] if rng.random() < 0.5
                     else rng.integers(8000, 9000, int(rng.integers(3, 30))))
            parts.append(piece)
            size += len(piece)
        out.append(request(prompt, np.concatenate(parts)[:answer_len], i + 1))
    return out


def test_adaptive_replay_runs_the_real_proposer_with_consistent_counters():
    traffic = copying_traffic(12)
    engine_clock = vars(AdaptiveProposer)["clock"]
    result = replay(traffic, MethodConfig("adaptive", 8), max_model_len=1024)
    consistent(result, traffic)
    assert result.accepted.sum() > 0.5 * result.drafted.sum() > 0
    assert any("step costs" in note for note in result.notes)
    assert vars(AdaptiveProposer)["clock"] is engine_clock  # set on its own instance only


def test_adaptive_drafts_by_the_simulated_step_costs():
    traffic = copying_traffic(12, seed=1)
    cheap = replay(traffic, MethodConfig("adaptive", 8), max_model_len=1024,
                   step_seconds=lambda rows, drafted: 0.010 + 1e-6 * drafted)
    dear = replay(traffic, MethodConfig("adaptive", 8), max_model_len=1024,
                  step_seconds=lambda rows, drafted: 0.010 + 0.020 * drafted)
    assert dear.drafted.sum() < 0.5 * cheap.drafted.sum()
    assert any("supplied" in note for note in dear.notes)


# -- bad configurations -----------------------------------------------------------------------

@pytest.mark.parametrize(("config", "flag"), [
    (MethodConfig("ngram", 0), "--k"), (MethodConfig("suffix", 65), "--k"),
    (MethodConfig("eagle", 4), "--method"), (ngram(4, 0, None), "--prompt-lookup-min"),
    (ngram(4, 3, 2), "--prompt-lookup-min"), (ngram(4, None, 5000), "--prompt-lookup-max"),
])
def test_a_bad_config_is_one_line_naming_the_flag(config, flag):
    with pytest.raises(SpecDecodeConfigError) as caught:
        replay([request(PROMPT, PROMPT)], config, max_model_len=1024)
    message = str(caught.value)
    assert flag in message and "\n" not in message


def test_suffix_without_arctic_inference_says_to_install_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "arctic_inference.suffix_decoding", None)  # import fails
    replay_module._resolved.cache_clear()
    try:
        with pytest.raises(SpecDecodeConfigError, match="install.*arctic-inference") as caught:
            replay([request(PROMPT, PROMPT)], MethodConfig("suffix", 7), max_model_len=1024)
        assert "\n" not in str(caught.value)
    finally:
        replay_module._resolved.cache_clear()


# -- speed, memory, progress ------------------------------------------------------------------

def test_ngram_replay_reports_progress_in_bounded_memory():
    """Its speed (~1M tokens/s alone on the 2-core host) is a benchmark's question, not a unit
    test's: timed here it read 60k/s beside the engine tests in a CI run."""
    traffic = copying_traffic(100, prompt_len=1000, answer_len=256)  # 1,000-token prompts
    replay(traffic[:1], ngram(5, None, 4), max_model_len=4096)  # numba compiles once
    done: list[int] = []
    tracemalloc.start()
    try:
        result = replay(traffic, ngram(5, None, 4), max_model_len=4096, progress=done.append)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert done == list(range(1, 101))
    assert result.output_tokens.sum() == 100 * 256
    assert peak < 256 * 1024  # one token row and the counters, whatever the traffic's size

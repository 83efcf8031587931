"""Model Runner V2's n-gram drafter replayed (`whatif/replay_mrv2.py`) against vLLM's own
`NgramGPUSpeculator`, and which drafter `whatif` picks for a host (`drafter.host_drafter`).

The check against vLLM: 200 synthetic requests (a seeded generator over a small vocabulary:
spans copied from the prompt and the output so far, runs of one token, new tokens), in four
groups of (k, prompt_lookup_min, prompt_lookup_max, max_model_len). Every verify step's context
the replay drafted from is handed to `NgramGPUSpeculator.propose`, the class vLLM 0.32/0.33
build, run on CPU tensors under Triton's interpreter in one process of its own
(`tests/support/mrv2_ngram_probe.py`: TRITON_INTERPRET must be set before triton is imported;
one `propose` call per group, all its steps as rows). A loop over the kernels' drafts, written
here apart from the replay, then plays the verify steps: per step the k drafts, the tokens
verified and accepted must equal the replay's; per request the steps, draft tokens, accepted
tokens and accepted by position must equal `replay.replay`'s. What is patched is Triton's
interpreter, not vLLM: the finalize kernel's load mask (an `&` of bool tensors) reaches the
interpreter's load as int32 and is refused ("mask has unsupported dtype"), so its
`create_masked_load` passes the mask as bool; vLLM's kernels run as written.
"""

from __future__ import annotations

import subprocess
import sys
import time
from itertools import zip_longest
from pathlib import Path

import numpy as np
import pytest

from vllm_specdec_plugin.core.errors import SpecDecodeConfigError
from vllm_specdec_plugin.whatif.drafter import (
    MRV2_NGRAM,
    V1_ADAPTIVE,
    V1_NGRAM,
    V1_SUFFIX,
    async_scheduling,
    host_drafter,
)
from vllm_specdec_plugin.whatif.replay import replay
from vllm_specdec_plugin.whatif.replay_mrv2 import propose_mrv2, trace_request
from vllm_specdec_plugin.whatif.types import MethodConfig, ReplayRequest

pytest.importorskip("numba")

PROBE = Path(__file__).resolve().parents[2] / "support" / "mrv2_ngram_probe.py"
MRV2 = host_drafter("ngram", "cuda")


def lookup(k: int, low: int, high: int) -> dict[str, int]:
    return {"num_speculative_tokens": k, "prompt_lookup_min": low, "prompt_lookup_max": high}


def request(prompt: list[int], completion: list[int]) -> ReplayRequest:
    return ReplayRequest(np.asarray(prompt, dtype=np.int32),
                         np.asarray(completion, dtype=np.int32), 1)


def drafts(context: list[int], k: int = 4, low: int = 1, high: int = 3,
           max_model_len: int = 1024) -> list[int]:
    return propose_mrv2(np.asarray(context), lookup(k, low, high), max_model_len).tolist()


# -- hand-built contexts with known drafts ------------------------------------------------------

def test_of_equal_matches_the_rightmost_wins():
    # "1 2" is at 0 and at 4: the rightmost (V1's matcher takes the earliest: 3 1 2 ...)
    assert drafts([1, 2, 3, 9, 1, 2, 4, 1, 2]) == [4, 1, 2, 2]


def test_the_longest_n_wins_over_a_later_shorter_match():
    # "1 2 3" at 0 (n=3) beats "2 3" at 4 and "3" at 5 (further right, shorter)
    assert drafts([1, 2, 3, 8, 2, 3, 1, 2, 3]) == [8, 2, 3, 1]
    # below prompt_lookup_min nothing counts: only n=2 is asked for, "3" alone is no match
    assert drafts([3, 7, 5, 3], low=2, high=2) == [3, 3, 3, 3]


def test_no_match_drafts_k_copies_of_the_last_token():
    assert drafts([5, 6, 7]) == [7, 7, 7, 7]
    assert drafts([5], k=3) == [5, 5, 5]
    # the suffix itself is never a match (pos + n <= length - 1)
    assert drafts([4, 4], k=3, low=2, high=2) == [4, 4, 4]


def test_a_match_near_the_end_pads_with_the_last_token():
    # "7" last seen at 2: the draft starts at 3 and has 2 tokens, then the last token twice
    assert drafts([1, 2, 7, 8, 7]) == [8, 7, 7, 7]


def test_padded_slots_are_drafts_and_are_accepted_where_the_text_repeats_the_token():
    # nothing in "10 11 12" recurs: every step drafts k copies of the last token; a run of
    # 12s accepts them (V1's matcher drafts nothing on the first step here)
    prompt, completion = [10, 11, 12], [12, 12, 12, 12, 12, 12]
    trace = trace_request(request(prompt, completion), lookup(3, 2, 2), 1024)
    assert trace.lengths.tolist() == [4, 8]
    assert trace.drafts.tolist() == [[12, 12, 12], [12, 12, 12]]
    assert trace.accepted.tolist() == [3, 1]  # the last step: 1 token left to verify
    result = replay([request(prompt, completion)], MethodConfig("ngram", 3, 2, 2),
                    max_model_len=1024, drafter=MRV2)
    assert (result.steps.tolist(), result.drafting_steps.tolist(), result.drafted.tolist(),
            result.accepted.tolist()) == ([2], [2], [6], [4])
    assert result.accepted_by_position.tolist() == [2, 1, 1]
    assert result.drafter == MRV2_NGRAM and result.drafter_why == MRV2.why
    v1 = replay([request(prompt, completion)], MethodConfig("ngram", 3, 2, 2),
                max_model_len=1024)
    # V1 drafts nothing first ("12 12" has no earlier match), then 1 token, then 3: 3 steps
    assert (v1.steps.tolist(), v1.drafting_steps.tolist(), v1.drafted.tolist()) == (
        [3], [2], [4])
    assert v1.drafter == ""


def test_every_step_drafts_k_where_v1_drafts_only_on_a_match():
    prompt, completion = list(range(100, 130)), list(range(200, 220))  # nothing recurs
    result = replay([request(prompt, completion)], MethodConfig("ngram", 4, 1, 3),
                    max_model_len=1024, drafter=MRV2)
    assert result.steps.tolist() == [19] and result.drafted.tolist() == [19 * 4]
    assert result.drafting_steps.tolist() == [19] and result.accepted.tolist() == [0]
    v1 = replay([request(prompt, completion)], MethodConfig("ngram", 4, 1, 3),
                max_model_len=1024, drafter=host_drafter("ngram", "cpu"))
    assert v1.drafted.tolist() == [0] and v1.drafter == V1_NGRAM


def test_the_scheduler_clips_the_draft_at_max_model_len():
    # 6 prompt tokens, max_model_len 12: the completion is cut to 6 tokens; at context 7 the
    # draft may hold 12 - 1 - 7 = 4 of its 5 tokens, at context 11 none (the drafter still
    # drafts 5: the clip is the scheduler's)
    prompt, completion = [1, 2, 3, 1, 2, 3], [1, 2, 3, 1, 2, 3, 1, 2]
    trace = trace_request(request(prompt, completion), lookup(5, 1, 3), 12)
    assert trace.lengths.tolist() == [7, 11]
    assert trace.drafts.tolist() == [[2, 3, 1, 1, 1], [3, 1, 2, 2, 2]]
    assert trace.sizes.tolist() == [4, 0]
    assert trace.accepted.tolist() == [3, 0]
    result = replay([request(prompt, completion)], MethodConfig("ngram", 5, 1, 3),
                    max_model_len=12, drafter=MRV2)
    assert (result.output_tokens.tolist(), result.steps.tolist(),
            result.drafting_steps.tolist(), result.drafted.tolist()) == ([6], [2], [1], [4])


# -- the drafter each host gets ------------------------------------------------------------------

@pytest.mark.parametrize(("method", "platform", "runner", "name"), [
    ("ngram", "cuda", None, MRV2_NGRAM), ("ngram", "cuda", "v2", MRV2_NGRAM),
    ("ngram", "cuda", "v1", V1_NGRAM), ("ngram", "cpu", None, V1_NGRAM),
    ("ngram", "rbln", None, V1_NGRAM), ("ngram", "cpu", "v1", V1_NGRAM),
    ("suffix", "cuda", None, V1_SUFFIX), ("adaptive", "cuda", None, V1_ADAPTIVE),
    ("suffix", "cpu", "v1", V1_SUFFIX), ("adaptive", "rbln", None, V1_ADAPTIVE)])
def test_the_drafter_follows_the_host_and_the_runner(method, platform, runner, name):
    chosen = host_drafter(method, platform, runner)
    assert chosen.name == name and "\n" not in chosen.why
    if name == MRV2_NGRAM:
        assert "k tokens every step" in chosen.why and "rightmost" in chosen.why


@pytest.mark.parametrize(("method", "platform", "text"), [
    ("ngram", "cpu", "--runner v2 with --platform cpu: "),
    ("suffix", "cuda", "--runner v2 with --method suffix: "),
    ("adaptive", "cuda", "no drafter for 'custom_class'")])
def test_a_runner_vllm_would_refuse_is_one_line(method, platform, text):
    with pytest.raises(SpecDecodeConfigError) as caught:
        host_drafter(method, platform, "v2")
    assert text in str(caught.value) and "\n" not in str(caught.value)


@pytest.mark.parametrize(("method", "platform", "runner", "release", "hidden"), [
    ("ngram", "cuda", None, "0.32", 0.001), ("ngram", "cuda", None, "0.33", 0.0),
    ("ngram", "cuda", "v1", "0.33", 0.001), ("ngram", "cuda", "v2", "0.34", 0.0),
    ("suffix", "cuda", None, "0.33", 0.001), ("adaptive", "cuda", None, "0.32", 0.001),
    ("ngram", "cuda", None, None, 0.001), ("ngram", "cpu", None, "0.32", 0.0),
    ("suffix", "cpu", None, "0.33", 0.0), ("ngram", "rbln", None, "0.30", None),
    ("adaptive", "rbln", None, "0.33", None)])
def test_async_scheduling_follows_the_host_the_drafter_and_the_release(method, platform, runner,
                                                                      release, hidden):
    """The plain engine's hidden host work is priced where it schedules asynchronously and the
    speculating one does not: on cuda but for Model Runner V2's ngram from vLLM 0.33 (its async
    check covers the V1 runner only; tests/compat/test_vllm033.py checks the rule against vLLM
    0.33's own config); nothing on cpu; not priced on rbln."""
    drafter = host_drafter(method, platform, runner).name
    found = async_scheduling(method, drafter, platform, 0.001, release)
    assert found.hidden_s == hidden and "\n" not in found.why
    assert found.why.startswith("off in both" if platform == "cpu" else "not priced" if
                                platform == "rbln" else "priced" if hidden else "on in both")


# -- against vLLM's kernels ----------------------------------------------------------------------

GROUPS = (  # k, prompt_lookup_min, prompt_lookup_max, max_model_len, prompt lengths, requests
    (3, 1, 3, 128, (8, 40), 50),  # two kernel blocks of 64 positions
    (5, 2, 4, 128, (8, 40), 50),
    (5, 1, 3, 80, (8, 40), 50),  # completions cut at 80, drafts clipped near it
    (3, 2, 4, 48, (6, 30), 50),  # one block; most completions cut, drafts clipped
)


def synthetic(rng: np.random.Generator, count: int, prompts: tuple[int, int],
              vocab: int = 20) -> list[ReplayRequest]:
    """Requests with repetition: a random prompt, then a completion of 8-20 tokens made of
    spans copied from what is there so far, runs of the last token and new tokens."""
    out = []
    for _ in range(count):
        prompt = rng.integers(0, vocab, int(rng.integers(*prompts))).tolist()
        size = int(rng.integers(8, 21))
        completion: list[int] = []
        while len(completion) < size:
            text, kind = prompt + completion, rng.random()
            if kind < 0.7:
                start = int(rng.integers(0, len(text) - 1))
                completion += text[start:start + int(rng.integers(3, 13))]
            elif kind < 0.82:
                completion += [text[-1]] * int(rng.integers(1, 6))
            else:
                completion += rng.integers(0, vocab, int(rng.integers(1, 4))).tolist()
        out.append(request(prompt, completion[:size]))
    return out


def kernel_loop(req: ReplayRequest, k: int, max_model_len: int,
                kernel: dict[int, np.ndarray]) -> list[tuple[int, list[int], int, int]]:
    """The verify steps played on the kernels' drafts (`kernel`: context length -> its k
    drafts): (length, drafts, verified, accepted) per step; the rules of `replay.py`'s
    docstring, written apart from the replay."""
    prompt = req.prompt_ids.tolist()
    tokens = prompt + req.completion_ids.tolist()
    n = min(len(req.completion_ids), max_model_len - len(prompt))
    steps, g = [], 1
    while g < n:
        length = len(prompt) + g
        if length not in kernel:  # the replay never drafted here: it took another path
            steps.append((length, [], -1, -1))
            break
        draft = kernel[length].tolist()
        verified = min(k, max_model_len - 1 - length)
        accepted = 0
        while (accepted < verified and g + accepted < n
               and draft[accepted] == tokens[length + accepted]):
            accepted += 1
        steps.append((length, draft, verified, accepted))
        g += min(1 + accepted, n - g)
    return steps


def start_kernels(tmp_path: Path) -> subprocess.Popen[str]:
    """The probe, started first: it imports vLLM (~9 s here) while the replay runs."""
    return subprocess.Popen([sys.executable, str(PROBE), "-", str(tmp_path / "drafts.npz")],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def run_kernels(probe: subprocess.Popen[str],
                groups: list[tuple[tuple[int, int, int, int], np.ndarray, np.ndarray]],
                tmp_path: Path) -> tuple[list[np.ndarray], list[float]]:
    """All groups' states to the probe; each group's k drafts per state, and the kernels' time."""
    payload = {}
    for i, (config, tokens, lengths) in enumerate(groups):
        payload.update({f"config_{i}": np.asarray(config), f"tokens_{i}": tokens,
                        f"lengths_{i}": lengths})
    np.savez(tmp_path / "states.npz", **payload)
    try:
        _, stderr = probe.communicate(f"{tmp_path / 'states.npz'}\n", timeout=600)
    finally:
        if probe.poll() is None:
            probe.kill()
    assert probe.returncode == 0, stderr[-3000:]
    out = np.load(tmp_path / "drafts.npz")
    return [out[f"drafts_{i}"] for i in range(len(groups))], out["seconds"].tolist()


@pytest.mark.contract  # vLLM's own kernels, no model
def test_the_replay_equals_vllms_ngram_gpu_speculator_step_by_step(tmp_path):
    started = time.perf_counter()
    probe = start_kernels(tmp_path)
    rng = np.random.default_rng(39)
    plan = []  # per group: config, requests, traces
    states = []
    for k, low, high, max_model_len, prompts, count in GROUPS:
        requests = synthetic(rng, count, prompts)
        traces = [trace_request(r, lookup(k, low, high), max_model_len) for r in requests]
        rows, lengths = [], []
        for req, trace in zip(requests, traces, strict=True):
            row = np.zeros(max_model_len, dtype=np.int32)  # the context, then the future
            tokens = np.concatenate([req.prompt_ids, req.completion_ids])[:max_model_len]
            row[:len(tokens)] = tokens
            rows += [row] * len(trace.lengths)
            lengths += trace.lengths.tolist()
        states.append(((k, low, high, max_model_len), np.stack(rows),
                       np.asarray(lengths, dtype=np.int32)))
        result = replay(requests, MethodConfig("ngram", k, low, high),
                        max_model_len=max_model_len, drafter=MRV2)
        plan.append(((k, low, high, max_model_len), requests, traces, result))
    kernel_drafts, kernel_seconds = run_kernels(probe, states, tmp_path)

    mismatches: list[str] = []
    checked = steps_checked = 0
    for ((k, low, high, max_model_len), requests, traces, result), found in zip(
            plan, kernel_drafts, strict=True):
        assert found.shape == (sum(len(t.lengths) for t in traces), k)
        assert result.requests == len(requests) and result.drafter == MRV2_NGRAM
        by_position = np.zeros(k, dtype=np.int64)
        at = 0
        for i, (req, trace) in enumerate(zip(requests, traces, strict=True)):
            kernel = {int(length): found[at + j] for j, length in enumerate(trace.lengths)}
            at += len(trace.lengths)
            ours = list(zip(trace.lengths.tolist(), trace.drafts.tolist(),
                            trace.sizes.tolist(), trace.accepted.tolist(), strict=True))
            theirs = kernel_loop(req, k, max_model_len, kernel)
            if ours != theirs:
                first = next((a, b) for a, b in zip_longest(ours, theirs) if a != b)
                mismatches.append(f"group k={k} n={low}-{high} L={max_model_len} request {i}: "
                                  f"replay {first[0]} vLLM {first[1]}")
            for _, _, _, accepted in theirs:
                by_position[:accepted] += 1
            totals = (len(theirs), sum(v > 0 for _, _, v, _ in theirs),
                      sum(v for _, _, v, _ in theirs), sum(a for _, _, _, a in theirs))
            replayed = (int(result.steps[i]), int(result.drafting_steps[i]),
                        int(result.drafted[i]), int(result.accepted[i]))
            if replayed != totals:
                mismatches.append(f"request {i}: replay() {replayed} vLLM's loop {totals}")
            checked += 1
            steps_checked += len(theirs)
        if result.accepted_by_position.tolist() != by_position.tolist():
            mismatches.append(f"group k={k} n={low}-{high}: by position "
                              f"{result.accepted_by_position.tolist()} vLLM's loop "
                              f"{by_position.tolist()}")
    print(f"\nMRV2 n-gram replay against NgramGPUSpeculator: {checked} requests, "
          f"{steps_checked} steps, {len(mismatches)} mismatches (kernels "
          f"{sum(kernel_seconds):.1f} s, test {time.perf_counter() - started:.1f} s)")
    assert mismatches == [], mismatches[:5]
    assert checked >= 200 and steps_checked >= 1000

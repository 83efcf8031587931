"""Exact replay: the drafts and acceptances each method would have had on logged requests.

Under greedy decoding a request's tokens do not depend on speculation, so replaying its prompt
and completion through the drafter vLLM runs gives the drafts the engine would have proposed and
which of them its verify steps would have accepted, for the requests served one at a time in
traffic order. Per request: the prefill step emits the completion's first token; then, while
`g < n` tokens are out, the drafter proposes from prompt + completion[:g] (at most k tokens,
clipped so that context + draft stays within max_model_len - 1, as vLLM's scheduler clips it:
never by max_tokens), one verify step accepts the draft's longest prefix equal to the tokens
that came and emits min(1 + accepted, n - g) tokens.

One rule is ours: a draft position past the completion's end counts as rejected, unless the
request carries the model's continuation (`ReplayRequest.continuation`, a benchmark's). The engine
verifies it against the model's next token, which the log does not hold (vLLM counts drafts past
max_tokens, and their accepted tokens, though it throws them away), so on a request's last step
the replay can count fewer accepted tokens than the engine; and the suffix tree is given only
the completion's tokens on that step.

The drafters are vLLM's: the installed vLLM's V1 n-gram matcher (called from a numba loop over
one request, not copied); for a CUDA host, Model Runner V2's n-gram drafter (`replay_mrv2.py`,
written from its kernels and checked against them); arctic-inference's `SuffixDecodingCache`
driven as vLLM's `SuffixDecodingProposer` drives it (its cross-request cache kept across the
traffic) and the plugin's `AdaptiveProposer` (`replay_adaptive.py`), with vLLM's resolution of
their parameters (`resolve`). Memory: one token row reused, per-request counters in preallocated
arrays; the suffix tree's cross-request cache is bounded as vLLM bounds it (max_cached_requests).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from vllm_specdec_plugin.core.errors import SpecDecodeConfigError
from vllm_specdec_plugin.core.limits import MAX_MODEL_LEN, MAX_NGRAM_LOOKUP, MAX_SPEC_TOKENS
from vllm_specdec_plugin.core.methods import ADAPTIVE_CLASS_PATH
from vllm_specdec_plugin.whatif.drafter import MRV2_NGRAM, Drafter, HostDrafter
from vllm_specdec_plugin.whatif.types import METHODS, MethodConfig, ReplayRequest, ReplayResult

MAX_K, MAX_LOOKUP = MAX_SPEC_TOKENS, MAX_NGRAM_LOOKUP  # the bounds, `core/limits.py`
PAST_END_NOTE = ("a draft position past a completion's end counts as rejected (the log does "
                 "not hold the model's token there)")


class Counts:
    """Per-request counters in preallocated arrays (traffic order), filled one row a request;
    `skipped` and `cut` count the requests the engine would refuse or stop at max_model_len."""

    def __init__(self, requests: int, k: int) -> None:
        self.output, self.steps, self.drafting, self.drafted, self.accepted = (
            np.zeros(requests, dtype=np.int64) for _ in range(5))
        self.by_position = np.zeros(k, dtype=np.int64)
        self.rows = self.skipped = self.cut = self.past_end_open = 0

    def result(self, config: MethodConfig, resolved: dict[str, Any], seconds: float,
               notes: Sequence[str], drafter: HostDrafter | None = None) -> ReplayResult:
        rows, extra = self.rows, [PAST_END_NOTE, *notes]
        if self.skipped:
            extra.append(f"{self.skipped} request(s) skipped: an empty prompt or completion, "
                         "or a prompt of max_model_len tokens or more (the engine refuses them)")
        if self.cut:
            extra.append(f"{self.cut} completion(s) cut where prompt + completion reaches "
                         "max_model_len (the engine stops there)")
        return ReplayResult(
            config=config, resolved=resolved, output_tokens=self.output[:rows],
            steps=self.steps[:rows], drafting_steps=self.drafting[:rows],
            drafted=self.drafted[:rows], accepted=self.accepted[:rows],
            accepted_by_position=self.by_position, seconds=seconds,
            past_end_open=self.past_end_open, notes=tuple(extra),
            drafter=drafter.name if drafter else "", drafter_why=drafter.why if drafter else "")


def check_config(config: MethodConfig, max_model_len: int) -> None:
    """One line naming the flag and the fix for a configuration the replay cannot run."""
    if config.method not in METHODS:
        raise SpecDecodeConfigError(f"--method {config.method!r}: whatif replays "
                                    f"{', '.join(METHODS)}; pass one of them")
    if not isinstance(config.k, int) or not 1 <= config.k <= MAX_K:
        raise SpecDecodeConfigError(f"--k {config.k!r}: num_speculative_tokens must be a whole "
                                    f"number from 1 to {MAX_K}; pass e.g. --k 4")
    if not isinstance(max_model_len, int) or not 2 <= max_model_len <= MAX_MODEL_LEN:
        raise SpecDecodeConfigError(f"max_model_len {max_model_len!r}: must be from 2 to "
                                    f"{MAX_MODEL_LEN}; give --max-model-len N")
    if config.method != "ngram":
        return
    for flag, value in (("--prompt-lookup-min", config.prompt_lookup_min),
                        ("--prompt-lookup-max", config.prompt_lookup_max)):
        if value is not None and (not isinstance(value, int) or not 1 <= value <= MAX_LOOKUP):
            raise SpecDecodeConfigError(f"{flag} {value!r}: an n-gram length must be a whole "
                                        f"number from 1 to {MAX_LOOKUP}; pass e.g. {flag} 4")
    low, high = config.prompt_lookup_min, config.prompt_lookup_max
    if low is not None and high is not None and low > high:
        raise SpecDecodeConfigError(f"--prompt-lookup-min {low} is above --prompt-lookup-max "
                                    f"{high}; pass a minimum no larger than the maximum")


def _suffix_available() -> bool:
    try:
        import arctic_inference.suffix_decoding  # noqa: F401
    except ImportError:
        return False
    return True


def resolve(config: MethodConfig) -> dict[str, Any]:
    """The speculative config as the installed vLLM resolves it (its `SpeculativeConfig`, so
    prompt_lookup defaults and the suffix tree's parameters are vLLM's); adaptive: the
    `custom_class` config the plugin's presets write (vLLM resolves nothing else for it)."""
    check_config(config, 2)
    return dict(_resolved(config))


@functools.cache
def _resolved(config: MethodConfig) -> dict[str, Any]:
    k = config.k
    if config.method == "adaptive":
        return {"method": "custom_class", "model": ADAPTIVE_CLASS_PATH,
                "num_speculative_tokens": k}
    if config.method == "suffix" and not _suffix_available():
        raise SpecDecodeConfigError("--method suffix needs arctic-inference: install it "
                                    "(pip install arctic-inference) or leave suffix out")
    from vllm.config import SpeculativeConfig

    kwargs: dict[str, Any] = {"method": config.method, "num_speculative_tokens": k}
    if config.method == "ngram":
        kwargs.update(prompt_lookup_min=config.prompt_lookup_min,
                      prompt_lookup_max=config.prompt_lookup_max)
    try:
        spec = SpeculativeConfig(**kwargs)
    except (ValueError, ImportError) as exc:  # pydantic's ValidationError is a ValueError
        raise SpecDecodeConfigError(f"vLLM refuses the speculative config {kwargs}: "
                                    f"{_one_line(exc)}") from None
    out: dict[str, Any] = {"method": spec.method, "num_speculative_tokens":
                           int(spec.num_speculative_tokens)}
    names = (("prompt_lookup_min", "prompt_lookup_max") if config.method == "ngram" else
             ("suffix_decoding_max_tree_depth", "suffix_decoding_max_spec_factor",
              "suffix_decoding_min_token_prob", "suffix_decoding_max_cached_requests"))
    out.update({name: getattr(spec, name) for name in names})
    return out


def _one_line(exc: BaseException) -> str:
    """pydantic's first error message, not its multi-line report; else the first line."""
    errors = exc.errors() if hasattr(exc, "errors") else None
    lines = [str(errors[0]["msg"])] if errors else str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__


def replay(requests: Sequence[ReplayRequest], config: MethodConfig, *, max_model_len: int,
           step_seconds: Callable[[int, int], float] | None = None,
           progress: Callable[[int], None] | None = None,
           drafter: HostDrafter | None = None) -> ReplayResult:
    """Replay `requests` one at a time in traffic order through `config`'s drafter (rules: the
    module docstring). `step_seconds(rows, drafted)` is adaptive's only: the simulated time of
    one step, from which its cost table learns (default `replay_adaptive.default_step_seconds`);
    `progress(done)` is called after each request with the number replayed so far; `drafter`
    (`drafter.host_drafter`) picks ngram's drafter (None: the V1 matcher) and is carried into
    the result. Bad configuration: `SpecDecodeConfigError`, one line."""
    check_config(config, max_model_len)
    resolved, counts = resolve(config), Counts(len(requests), config.k)
    notes: list[str] = []
    # the token rows hold the longest request: a longer max_model_len clips no draft and no
    # request (every context stays MAX_K + 2 below it), so the counts are the same
    longest = max((len(r.prompt_ids) + len(r.completion_ids) for r in requests), default=0)
    max_model_len = min(max_model_len, longest + MAX_K + 2)
    # one-time costs (numba compiling, the drafter) precede the clock: `seconds` is the replay's
    if config.method == "ngram":
        mrv2 = drafter is not None and drafter.name == MRV2_NGRAM
        _warm_ngram_loop(resolved, max_model_len, mrv2)
        start = time.perf_counter()
        replay_ngram(requests, resolved, max_model_len, counts, progress, mrv2)
    else:
        from vllm_specdec_plugin.whatif.replay_adaptive import AdaptiveDrafter, SuffixDrafter

        proposer = (SuffixDrafter(resolved, max_model_len) if config.method == "suffix" else
                    AdaptiveDrafter(config.k, max_model_len, step_seconds))
        start = time.perf_counter()
        try:
            replay_python(requests, proposer, config.k, max_model_len, counts, progress)
        finally:
            proposer.close()
        notes.extend(proposer.notes)
    return counts.result(config, resolved, time.perf_counter() - start, notes, drafter)


def _fit(request: ReplayRequest, max_model_len: int, counts: Counts) -> tuple[int, int]:
    """(prompt length, completion tokens the engine would emit); (0, 0) to skip the request."""
    prompt_len, n = len(request.prompt_ids), len(request.completion_ids)
    if prompt_len == 0 or n == 0 or prompt_len >= max_model_len:
        counts.skipped += 1
        return 0, 0
    if prompt_len + n > max_model_len:
        counts.cut += 1
        n = max_model_len - prompt_len
    return prompt_len, n


def _target(request: ReplayRequest, n: int) -> np.ndarray:
    """What the verify steps compare drafts with: the completion's first `n` tokens, and the
    model's continuation after them where the request carries one (only when the completion is
    whole: a completion cut at max_model_len has no continuation the engine would see)."""
    completion = np.asarray(request.completion_ids[:n], dtype=np.int32)
    extra = request.continuation
    if extra is None or n < len(request.completion_ids) or not len(extra):
        return completion
    return np.concatenate([completion, np.asarray(extra[:MAX_K], dtype=np.int32)])


@functools.cache
def _ngram_loop() -> Any:
    """A numba loop over one request's steps around vLLM's own matcher (one per process: each
    new numba function compiles again, ~0.5 s here)."""
    import numba
    from vllm.v1.spec_decode.ngram_proposer import (
        _find_longest_matched_ngram_and_propose_tokens as match,
    )

    @numba.njit(nogil=True)
    def one_request(row: np.ndarray, prompt_len: int, n: int, known: int, min_n: int,
                    max_n: int, max_model_len: int, k: int, by_position: np.ndarray
                    ) -> tuple[int, int, int, int, int]:  # pragma: no cover (compiled)
        # row holds prompt + completion (+ the continuation: `known` tokens in all); the
        # matcher sees only the context row[:length]
        steps = drafting = drafted = accepted = past_end = 0
        g = 1  # the prefill emitted the first token
        while g < n:
            length = prompt_len + g
            draft = match(row[:length], min_n, max_n, max_model_len, k)
            size = min(draft.shape[0], max_model_len - 1 - length)  # the scheduler's clip
            ok = 0
            while ok < size and g + ok < known and draft[ok] == row[length + ok]:
                by_position[ok] += 1
                ok += 1
            if ok < size and g + ok >= known:  # matched to the end of what is known
                past_end += size - ok
            steps += 1
            drafting += size > 0
            drafted += size
            accepted += ok
            g += min(1 + ok, n - g)
        return steps, drafting, drafted, accepted, past_end

    return one_request


def _warm_ngram_loop(resolved: dict[str, Any], max_model_len: int, mrv2: bool = False) -> None:
    """Compile the n-gram loop for its argument types (once per process)."""
    tokens = np.arange(8, dtype=np.int32)
    replay_ngram([ReplayRequest(tokens[:4], tokens[4:], 0)], resolved, max_model_len,
                 Counts(1, int(resolved["num_speculative_tokens"])), None, mrv2)


def replay_ngram(requests: Sequence[ReplayRequest], resolved: dict[str, Any],
                 max_model_len: int, counts: Counts,
                 progress: Callable[[int], None] | None, mrv2: bool = False) -> None:
    """The n-gram replay: vLLM's V1 matcher, or with `mrv2` Model Runner V2's drafter."""
    if mrv2:
        from vllm_specdec_plugin.whatif.replay_mrv2 import mrv2_loop

        loop = mrv2_loop()
    else:
        loop = _ngram_loop()
    row = np.zeros(max_model_len + MAX_K, dtype=np.int32)  # room for a continuation
    low, high, k = (int(resolved[name]) for name in
                    ("prompt_lookup_min", "prompt_lookup_max", "num_speculative_tokens"))
    for done, request in enumerate(requests, 1):
        prompt_len, n = _fit(request, max_model_len, counts)
        if n:
            target = _target(request, n)
            row[:prompt_len] = request.prompt_ids
            row[prompt_len:prompt_len + len(target)] = target
            i = counts.rows
            (counts.steps[i], counts.drafting[i], counts.drafted[i], counts.accepted[i],
             past_end) = loop(row, prompt_len, n, len(target), low, high, max_model_len, k,
                              counts.by_position)
            counts.past_end_open += past_end
            counts.output[i] = n
            counts.rows += 1
        if progress is not None:
            progress(done)


def replay_python(requests: Sequence[ReplayRequest], drafter: Drafter, k: int,
                  max_model_len: int, counts: Counts,
                  progress: Callable[[int], None] | None) -> None:
    """The step loop for the drafters called from Python (suffix, adaptive). The row is filled
    as the steps emit tokens, as the engine's token row is: a drafter never sees the future."""
    rows = np.zeros((1, max_model_len), dtype=np.int32)
    row = rows[0]
    by_position = counts.by_position
    for done, request in enumerate(requests, 1):
        prompt_len, n = _fit(request, max_model_len, counts)
        if n:
            completion = request.completion_ids[:n].tolist()
            target = _target(request, n).tolist()
            row[:prompt_len] = request.prompt_ids
            row[prompt_len] = completion[0]
            drafter.start(counts.rows, prompt_len, n, rows)
            steps = drafting = drafted = accepted = 0
            g, emitted = 1, completion[:1]
            sampled = emitted
            while g < n:
                length = prompt_len + g
                draft = drafter.propose(length, emitted)
                size = max(min(len(draft), k, max_model_len - 1 - length), 0)
                ok = 0
                while ok < size and g + ok < len(target) and draft[ok] == target[g + ok]:
                    ok += 1
                if ok < size and g + ok >= len(target):  # matched to the end of what is known
                    counts.past_end_open += size - ok
                by_position[:ok] += 1
                steps += 1
                drafting += size > 0
                drafted += size
                accepted += ok
                drafter.verified(size)
                out = min(1 + ok, n - g)
                # the engine's sampled tokens (what its drafter is handed after the step) run
                # past max_tokens on the last step, as far as the known tokens tell
                sampled = target[g:g + 1 + ok]
                emitted = completion[g:g + out]
                row[length:length + out] = emitted
                g += out
            drafter.finish(prompt_len + n, sampled)
            i = counts.rows
            counts.output[i], counts.steps[i], counts.drafting[i] = n, steps, drafting
            counts.drafted[i], counts.accepted[i] = drafted, accepted
            counts.rows += 1
        if progress is not None:
            progress(done)

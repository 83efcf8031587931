"""The drafters `replay.py` drives step by step from Python, each kept across the traffic as an
engine keeps it: arctic-inference's suffix cache (`SuffixDrafter`) and the plugin's adaptive
proposer (`AdaptiveDrafter`: the real `AdaptiveProposer`, called as vLLM's model runner calls
it, one request at a time, on a simulated clock).

The proposer decides how much to draft from its acceptance model and from a step-cost table it
learns by timing its own calls (`proposer/timing.py`). In a replay there is no engine step to
time, so its `clock` is a simulated one that advances by `step_seconds(rows, drafted)` for each
step: its drafts depend on that cost model (the default, `default_step_seconds`, is a fixed
shape, not this host's), and the result's notes say so. Everything else is the engine's own path:
`propose(sampled_token_ids, num_tokens_no_spec, token_ids_cpu)` after every step with the tokens
the step emitted (the prefill's one token first), a (1, max_model_len) int32 token row, and the
request's id and limits as the plugin's runner change hands them over (`request_limits`), with
max_tokens taken as the completion's length.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from types import SimpleNamespace
from typing import Any

import numpy as np

from vllm_specdec_plugin.core.settings import ENV_ADAPTIVE_STATS, ENV_ADAPTIVE_TRACE
from vllm_specdec_plugin.whatif.drafter import Drafter

BASE_STEP_SECONDS = 0.010
PER_DRAFT_SECONDS = 0.0005


def default_step_seconds(rows: int, drafted: int) -> float:
    """A fixed-shape step cost: 10 ms a step plus 0.5 ms per drafted token (rows ignored)."""
    return BASE_STEP_SECONDS + PER_DRAFT_SECONDS * drafted


class SimulatedClock:
    """The time the proposer reads: advanced by the replay, never by the wall clock."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@contextmanager
def _without(*names: str) -> Iterator[None]:
    """The proposer's statistics and trace files are for engines: a replay writes neither."""
    saved = {name: os.environ.pop(name) for name in names if name in os.environ}
    try:
        yield
    finally:
        os.environ.update(saved)


class AdaptiveDrafter(Drafter):
    """`AdaptiveProposer` in a batch of one (see the module docstring)."""

    def __init__(self, k: int, max_model_len: int,
                 step_seconds: Callable[[int, int], float] | None = None) -> None:
        from vllm_specdec_plugin.proposer.proposer import AdaptiveProposer

        config = SimpleNamespace(
            speculative_config=SimpleNamespace(num_speculative_tokens=k),
            model_config=SimpleNamespace(max_model_len=max_model_len),
            scheduler_config=SimpleNamespace(max_num_seqs=1))
        with _without(ENV_ADAPTIVE_STATS, ENV_ADAPTIVE_TRACE):
            self.proposer = AdaptiveProposer(config)
        self.clock = SimulatedClock()
        self.proposer.clock = self.clock
        self.step_seconds = step_seconds or default_step_seconds
        self.costs = ("the step_seconds supplied" if step_seconds else
                      f"a fixed shape ({BASE_STEP_SECONDS * 1e3:g} ms a step + "
                      f"{PER_DRAFT_SECONDS * 1e3:g} ms per drafted token)")
        self.rows = np.zeros((1, 0), dtype=np.int32)  # the replay's row, given by `start`
        self.counts = np.zeros(1, dtype=np.int32)

    @property
    def notes(self) -> tuple[str, ...]:
        notes = [f"adaptive: its drafts depend on the step costs it learns; the replay gives it "
                 f"{self.costs}, not a measured engine's; max_tokens is taken as the "
                 "completion's length"]
        errors = self.proposer.stats.errors
        if errors:  # the proposer never raises: a failed cycle drafts nothing, logged once
            notes.append(f"adaptive: the proposer failed in {errors} step(s), which drafted "
                         "nothing (its error is logged)")
        return tuple(notes)

    def start(self, index: int, prompt_len: int, n: int, rows: np.ndarray) -> None:
        self.rows = rows  # the replay's own row, filled as the steps emit tokens
        req_id = f"whatif-{index}"
        # what the runner's request state tells the proposer: where the request stops
        state = SimpleNamespace(sampling_params=SimpleNamespace(max_tokens=n),
                                num_prompt_tokens=prompt_len)
        self.proposer.request_limits = ([req_id], {req_id: state})
        self.clock.now += self.step_seconds(1, 0)  # the prefill: a new row's cycle is untimed

    def propose(self, num_tokens: int, emitted: list[int]) -> Sequence[int]:
        self.counts[0] = num_tokens
        return self.proposer.propose([emitted], self.counts, self.rows)[0]

    def verified(self, drafted: int) -> None:
        self.clock.now += self.step_seconds(1, drafted)

    def finish(self, num_tokens: int, emitted: list[int]) -> None:
        self.propose(num_tokens, emitted)


class SuffixDrafter(Drafter):
    """arctic-inference's suffix cache, called as vLLM's `SuffixDecodingProposer.propose` calls
    it for a batch of one (`_call`): below max_model_len, a request not active is started with
    its prompt (an id still cached is evicted first), the step's emitted tokens are added, the
    pattern is the context's last max_tree_depth tokens; then every active request that left the
    batch is stopped (after the new request's speculation, as vLLM does)."""

    def __init__(self, resolved: dict[str, Any], max_model_len: int) -> None:
        from arctic_inference.suffix_decoding import SuffixDecodingCache

        self.k, self.max_model_len = int(resolved["num_speculative_tokens"]), max_model_len
        self.depth = int(resolved["suffix_decoding_max_tree_depth"])
        self.factor = float(resolved["suffix_decoding_max_spec_factor"])
        self.min_prob = float(resolved["suffix_decoding_min_token_prob"])
        self.cache = SuffixDecodingCache(
            max_tree_depth=self.depth,
            max_cached_requests=int(resolved["suffix_decoding_max_cached_requests"]))
        self.row, self.req, self.prompt_len = np.zeros(0, dtype=np.int32), -1, 0

    def start(self, index: int, prompt_len: int, n: int, rows: np.ndarray) -> None:
        self.req, self.prompt_len, self.row = index, prompt_len, rows[0]

    def propose(self, num_tokens: int, emitted: list[int]) -> Sequence[int]:
        return self._call(num_tokens, emitted, speculate=True)

    def finish(self, num_tokens: int, emitted: list[int]) -> None:
        # the engine's call after the last step: the tokens join the cross-request tree; its
        # speculation only reads the cache and its draft is thrown away, so it is left out
        self._call(num_tokens, emitted, speculate=False)

    def _call(self, num_tokens: int, emitted: list[int], speculate: bool) -> list[int]:
        cache, req = self.cache, self.req
        tokens: list[int] = []
        if num_tokens < self.max_model_len:  # vLLM skips a request at max_model_len
            if req not in cache.active_requests:
                if req in cache.cached_requests:
                    cache.evict_cached_response(req)
                cache.start_request(req, self.row[:self.prompt_len])
            cache.add_active_response(req, emitted)
            if speculate:
                pattern = self.row[max(0, num_tokens - self.depth):num_tokens]
                tokens = cache.speculate(
                    req, pattern,
                    max_spec_tokens=min(self.k, self.max_model_len - num_tokens - 1),
                    max_spec_factor=self.factor, min_token_prob=self.min_prob).token_ids
        for gone in [r for r in cache.active_requests if r != req]:
            cache.stop_request(gone)
        return tokens

    def close(self) -> None:
        for req in list(self.cache.active_requests):
            self.cache.stop_request(req)

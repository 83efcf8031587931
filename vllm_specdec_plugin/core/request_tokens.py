"""Per request: how many draft tokens a request lets the engine propose for it.

A client sets `num_speculative_tokens` in the request's `extra_args` (vLLM's per-request
extension: `"vllm_xargs": {"num_speculative_tokens": N}` on the OpenAI server's chat and
completions endpoints, `/v1/responses` has no such field in vLLM 0.32-0.33;
`SamplingParams(extra_args={"num_speculative_tokens": N})` offline). `0` turns speculation
off for that request; `N > 0` caps its draft tokens per step at N, never above the engine's k
(the schedule or its controller may lower it further), so a whole number above the engine's k
means the engine's k. The name is vLLM's own
(`SpeculativeConfig.num_speculative_tokens`), so a client reads it as the engine's setting
applied to one request.

`VLLM_SPECDEC_REQUEST_TOKENS` is the server-wide value for requests that do not set the field
(unset: the engine's k; `0`: only requests that ask speculate). Pure: no vLLM, no I/O; the
engine change `engine/changes/engine_input_processor.py` validates and counts each request,
`engine/changes/core_sched_request_caps.py` applies the caps in the schedulers.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

FIELD = "num_speculative_tokens"
"""The key in `SamplingParams.extra_args` (the OpenAI server's `vllm_xargs`)."""
PARAMETER = f"vllm_xargs.{FIELD}"
"""How an error names the field to an OpenAI client."""
ACCEPTED = "a whole number >= 0 (0: no speculation for this request; N: at most N draft " \
    "tokens per step, the engine's k where N is larger)"

REQUESTS_METRIC = "vllm_specdec_requests_total"
"""The counter of requests an opted-in engine admitted, by `speculation` label."""
Speculation = Literal["on", "off", "capped"]
SPECULATION_LABELS: tuple[Speculation, ...] = ("on", "off", "capped")
"""The `speculation` label of `vllm_specdec_requests_total`: the engine's k ("on"), none
("off"), fewer than the engine's k ("capped")."""


class RequestTokensError(ValueError):
    """A request's `num_speculative_tokens` is not a whole number >= 0 (one line: the field,
    the value, what is accepted)."""

    def __init__(self, value: object, where: str = PARAMETER) -> None:
        shown = repr(value)
        if len(shown) > 80:  # a client's huge value is not echoed whole into logs
            shown = shown[:77] + "..."
        super().__init__(f"{where}={shown} is refused: expected {ACCEPTED}")
        self.value = value
        self.where = where


def parse_request_tokens(value: object, where: str = PARAMETER) -> int:
    """The cap a client asked for. JSON gives int, float, str, bool, list, dict or None:
    only an int >= 0 is a cap (a bool is not a number here, `2.0` and `"2"` are refused
    rather than guessed at: never a silent default)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise RequestTokensError(value, where)
    return int(value)


def parse_default(text: str | None) -> int | None:
    """`VLLM_SPECDEC_REQUEST_TOKENS` (None: unset or empty, the engine's k)."""
    if text is None or text.strip() == "":
        return None
    stripped = text.strip()
    if not stripped.isdecimal() or not stripped.isascii() or len(stripped) > 9:
        raise ValueError(f"VLLM_SPECDEC_REQUEST_TOKENS={text!r} is refused: expected a "
                         "whole number from 0 to 999999999 (the draft tokens a request "
                         "without vllm_xargs.num_speculative_tokens gets; unset: the "
                         "engine's k)")
    return int(stripped)


def request_cap(extra_args: Mapping[str, object] | None, default: int | None) -> int | None:
    """The request's cap (None: the engine's k). Raises `RequestTokensError` for a bad value."""
    if extra_args and FIELD in extra_args:
        return parse_request_tokens(extra_args[FIELD])
    return default


def speculation_label(cap: int | None, engine_k: int) -> Speculation:
    """How a request with `cap` speculates on an engine drafting up to `engine_k` tokens."""
    if cap is None or cap >= engine_k:
        return "on"
    return "off" if cap == 0 else "capped"

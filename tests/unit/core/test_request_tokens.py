"""A request's `num_speculative_tokens` (`core/request_tokens.py`): every JSON shape a client can
send, the server default, and the label each request is counted under. The parser is outside
input: hypothesis over arbitrary JSON values, each example within a time and a memory bound."""

from __future__ import annotations

import time
import tracemalloc

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.examples import examples

from vllm_specdec_plugin.core.errors import SpecDecodeConfigError
from vllm_specdec_plugin.core.request_tokens import (
    FIELD,
    RequestTokensError,
    parse_default,
    parse_request_tokens,
    request_cap,
    speculation_label,
)
from vllm_specdec_plugin.core.settings import ENV_REQUEST_TOKENS, check_settings

JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True)
                    | st.text(max_size=50),
                    lambda inner: st.lists(inner, max_size=5)
                    | st.dictionaries(st.text(max_size=5), inner, max_size=5), max_leaves=20)


@pytest.mark.parametrize("value", [0, 1, 5, 9, 2**70])
def test_a_whole_number_is_the_cap(value: int) -> None:
    assert parse_request_tokens(value) == value


# Every shape a JSON client can send that is not a whole number >= 0 (and Python's own
# look-alikes an offline caller can pass).
BAD = ["five", "2", "", " 3", -1, -(2**70), 2.5, 2.0, float("nan"), float("inf"), True, False,
       None, [1], [], {"k": 1}, {}, b"2", 1j]


@pytest.mark.parametrize("value", BAD, ids=repr)
def test_anything_else_is_refused_naming_the_field_the_value_and_what_is_accepted(
        value: object) -> None:
    with pytest.raises(RequestTokensError) as caught:
        parse_request_tokens(value)
    message = str(caught.value)
    assert message.startswith(f"vllm_xargs.num_speculative_tokens={value!r} is refused")
    assert "expected a whole number >= 0" in message and "\n" not in message
    assert caught.value.value is value or caught.value.value == value


def test_a_huge_value_is_not_echoed_whole() -> None:
    with pytest.raises(RequestTokensError) as caught:
        parse_request_tokens("x" * 10_000)
    assert len(str(caught.value)) < 300


def test_the_field_wins_over_the_default_and_absent_means_the_default() -> None:
    assert request_cap({FIELD: 3}, 0) == 3
    assert request_cap({FIELD: 0}, None) == 0
    assert request_cap({"other": 1}, 0) == 0
    assert request_cap(None, None) is None and request_cap({}, 2) == 2
    with pytest.raises(RequestTokensError):
        request_cap({FIELD: "3"}, 0)  # a bad field is refused, never replaced by the default


@pytest.mark.parametrize(("cap", "label"), [(None, "on"), (5, "on"), (9, "on"), (0, "off"),
                                            (1, "capped"), (4, "capped")])
def test_label(cap: int | None, label: str) -> None:
    assert speculation_label(cap, 5) == label


@pytest.mark.parametrize("text", ["", " ", None])
def test_the_default_unset_is_the_engines_k(text: str | None) -> None:
    assert parse_default(text) is None


@pytest.mark.parametrize(("text", "value"), [("0", 0), ("3", 3), (" 2 ", 2)])
def test_the_default(text: str, value: int) -> None:
    assert parse_default(text) == value


@pytest.mark.parametrize("text", ["-1", "2.5", "five", "1e3", "0x2", "٣", "1" * 10, "+1"])
def test_a_bad_default_stops_the_engine_naming_the_setting(text: str) -> None:
    with pytest.raises(SpecDecodeConfigError) as caught:
        check_settings({ENV_REQUEST_TOKENS: text})
    assert f"{ENV_REQUEST_TOKENS}={text!r} is refused" in str(caught.value)


@settings(derandomize=True, deadline=None, max_examples=examples(300),
          suppress_health_check=[HealthCheck.too_slow])
@given(JSON)
def test_any_json_value_is_a_cap_or_one_refusal_within_bounds(value: object) -> None:
    tracemalloc.start()
    started = time.perf_counter()
    try:
        cap = parse_request_tokens(value)
    except RequestTokensError as exc:
        assert "\n" not in str(exc) and len(str(exc)) < 300
    else:
        assert type(value) is int and cap == value >= 0
    finally:
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    assert time.perf_counter() - started < 1.0 and peak < 1 << 20


@settings(derandomize=True, deadline=None, max_examples=examples(200))
@given(st.text(max_size=30))
def test_any_default_text_is_a_number_or_one_refusal(text: str) -> None:
    try:
        value = parse_default(text)
    except ValueError as exc:
        assert str(exc).startswith(f"{ENV_REQUEST_TOKENS}=") and "\n" not in str(exc)
    else:
        assert value is None or (value >= 0 and str(value) == text.strip().lstrip("0") or
                                 value == 0)

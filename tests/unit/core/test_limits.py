"""The pure checks of core/limits.py: JSON depth without recursion, ASCII decimals, printable."""

from __future__ import annotations

import json

import pytest

from vllm_specdec_plugin.core.errors import SpecDecodeConfigError
from vllm_specdec_plugin.core.limits import (
    ascii_decimal,
    decode_text,
    int_too_large,
    json_depth,
    printable,
)


@pytest.mark.parametrize(("text", "depth"), [
    ("1", 0), ("[]", 1), ('{"a": [1, {"b": []}]}', 4), ('"[[[["', 0), ('["]\\"[["]', 1),
    ('{"a": "\\\\"}', 1), ("[" * 100_000, 100_000), ('"unterminated [[[', 0), ("]]]", -1),
])
def test_json_depth(text, depth):
    assert json_depth(text) == depth


def test_json_depth_agrees_with_the_parser_on_json():
    value = {"a": [1, [2, [3, {"b": "[{"}]]], "c": {"d": {}}}
    assert json_depth(json.dumps(value)) == 5


def test_json_depth_of_a_megabyte_is_fast():
    import time

    start = time.monotonic()
    json_depth('"\\"' * 300_000 + "[" * 500_000)  # escaped quotes: no quadratic rescans
    assert time.monotonic() - start < 2


@pytest.mark.parametrize(("text", "value"), [
    ("123", 123), (" 42\n", 42), ("²", None), ("١٢", None), ("", None), ("max", None),
    ("-1", None), ("1" * 33, None), ("12a", None),
])
def test_ascii_decimal(text, value):
    assert ascii_decimal(text) == value


def test_int_too_large():
    assert not int_too_large(10 ** 31) and int_too_large(10 ** 32) and int_too_large(-10 ** 40)


def test_printable_escapes_terminal_control():
    assert printable("plain text é") == "plain text é"
    assert printable("a\x1b[31mb\x07\r\n\x9b\u202e") == "a\\x1b[31mb\\x07\\x0d\\x0a\\x9b\\u202e"


def test_decode_text_names_the_byte():
    assert decode_text("é".encode(), "f", "fix") == "é"
    with pytest.raises(SpecDecodeConfigError, match=r"f is not UTF-8 text \(byte 0xff at "
                                                    r"offset 2\); fix"):
        decode_text(b"ab\xff", "f", "fix")

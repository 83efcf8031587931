"""The traffic-file reader's (`inputs/traffic.py`) bounds on time and memory, and its
property-based tests (hypothesis).

Measured directly: an over-long line is skipped without being held (tracemalloc's peak), the
file bound stops the reading, 200k lines parse in bounded time. Properties: arbitrary bytes,
arbitrary JSON lines and valid lines mutated with hostile fragments, cut into arbitrary
chunks, never make it raise anything but `TrafficError`, and each example stays within a time
bound and a memory bound, asserted. Every valid record of every format comes back exactly as
written, at its line.
"""

from __future__ import annotations

import json
import time
import tracemalloc
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.examples import examples

from vllm_specdec_plugin.core.limits import MAX_TRAFFIC_MESSAGES, MAX_TRAFFIC_TEXT_CHARS, MIB
from vllm_specdec_plugin.inputs.traffic import (
    TrafficError,
    TrafficFile,
    TrafficRecord,
    parse_traffic_chunks,
    read_traffic,
)

MEMORY_BOUND = 16 << 20
"""Peak bytes one example may allocate (inputs are a few KiB; the line bounds are lowered)."""
TIME_BOUND_S = 2.0
"""Seconds one example may take (tracemalloc on, 2 shared cores)."""
PROPERTY = settings(derandomize=True, deadline=None, max_examples=examples(300),
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
KEYS = ["prompt", "completion", "messages", "role", "content", "request", "response", "choices",
        "text", "message", "token_ids", "prompt_token_ids", "completion_token_ids", "type",
        "conversations", "from", "value", "error", "echo", "tools", "chat_template_kwargs",
        "reasoning", "add_special_tokens", "n"]
HOSTILE = ["[" * 80, "]" * 80, "{" * 80, '{"a":' * 70, "9" * 5001, "-" + "1" * 40, "1e999",
           "NaN", "Infinity", "\x00", "\x1b[31m", "\u202e", "\\ud800", '"', "\\", "\n", "\r\n",
           "\xef\xbb\xbf", "\ufeff", ",", ":", "null", "true", "[]", "{}", '"\\u0000"']
SMALL = {"max_line_bytes": 512, "max_sharegpt_bytes": 4096, "max_bytes": 2048}
"""Lowered bounds, so the over-long line, the ShareGPT bound and the file bound are hit."""


def within_bounds(parse: Callable[[], TrafficFile]) -> TrafficFile | None:
    """`parse()` returns or raises `TrafficError` (None then), within time and memory."""
    tracemalloc.start()
    start = time.perf_counter()
    try:
        return parse()
    except TrafficError as exc:
        assert "\n" not in str(exc), str(exc)
        return None
    finally:
        seconds = time.perf_counter() - start
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        assert seconds < TIME_BOUND_S, f"{seconds:.2f} s"
        assert peak < MEMORY_BOUND, f"peak {peak >> 20} MiB"


def chunked(data: bytes, cuts: list[int]) -> list[bytes]:
    """`data` cut at `cuts` (offsets, any order): lines and characters split across chunks."""
    points = sorted({0, len(data), *(c % (len(data) + 1) for c in cuts)})
    return [data[a:b] for a, b in zip(points, points[1:], strict=False)]


def check_counts(traffic: TrafficFile | None) -> None:
    if traffic is None:
        return
    assert traffic.records and traffic.skipped <= traffic.entries
    assert (traffic.first_bad is None) == (traffic.skipped == 0)
    lines = [r.line for r in traffic.records]
    assert lines == sorted(lines)


# --- the bounds, measured directly -------------------------------------------------------

def skipped_why(entry: dict[str, Any]) -> str:
    traffic = parse_traffic_chunks([json.dumps(entry).encode() + b'\n{"prompt": "p", '
                                    b'"completion": "c"}'], "t")
    assert traffic.first_bad is not None and len(traffic.records) == 1
    return traffic.first_bad[1]


def test_bounded_text_and_messages():
    assert skipped_why({"prompt": "x" * (MAX_TRAFFIC_TEXT_CHARS + 1), "completion": "c"}) == (
        f'line 1: "prompt" is {MAX_TRAFFIC_TEXT_CHARS + 1} characters (at most '
        f"{MAX_TRAFFIC_TEXT_CHARS})")
    many = [{"role": "user", "content": "hi"}] * (MAX_TRAFFIC_MESSAGES + 1)
    assert skipped_why({"messages": many, "completion": "c"}) == (
        f'line 1: "messages" has {MAX_TRAFFIC_MESSAGES + 1} messages (at most '
        f"{MAX_TRAFFIC_MESSAGES})")
    half = {"role": "user", "content": "x" * (MAX_TRAFFIC_TEXT_CHARS // 2 + 1)}
    assert skipped_why({"messages": [half, half], "completion": "c"}) == (
        f'line 1: "messages" holds {MAX_TRAFFIC_TEXT_CHARS + 2} characters (at most '
        f"{MAX_TRAFFIC_TEXT_CHARS})")


def test_file_byte_bound_stops_reading_and_drops_the_cut_line():
    line = json.dumps({"prompt": "p", "completion": "c"}).encode() + b"\n"
    traffic = parse_traffic_chunks([line * 10], "t", max_bytes=len(line) * 3 + 5)
    assert len(traffic.records) == 3 and traffic.skipped == 0 and traffic.truncated
    assert traffic.stop_reason is not None and "the rest was not read" in traffic.stop_reason


def test_over_long_line_skipped_and_the_next_line_read():
    good = json.dumps({"prompt": "p", "completion": "c"}).encode()
    data = good + b"\n" + b'{"prompt": "' + b"x" * 5000 + b'"}\n' + good + b"\n"
    traffic = parse_traffic_chunks([data[i:i + 100] for i in range(0, len(data), 100)], "t",
                                   max_line_bytes=1000)
    assert [r.line for r in traffic.records] == [1, 3]
    assert traffic.first_bad == (2, "line 2: longer than 1000 bytes; skipped")


def chunks_of_one_line(size: int, chunk: bytes) -> Iterator[bytes]:
    """A single line of `size` bytes, as the same chunk over and over (allocates nothing)."""
    for _ in range(size // len(chunk)):
        yield chunk
    yield b"\n" + json.dumps({"prompt": "p", "completion": "c"}).encode() + b"\n"


def test_over_long_line_is_never_held_in_memory():
    """A 256 MiB line with a 1 MiB line bound: the peak stays near the bound."""
    tracemalloc.start()
    try:
        traffic = parse_traffic_chunks(chunks_of_one_line(256 * MIB, b"x" * (64 << 10)), "t",
                                       max_line_bytes=MIB)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert traffic.skipped == 1 and len(traffic.records) == 1
    assert peak < 3 * MIB, f"peak {peak / MIB:.1f} MiB"


def test_over_long_line_in_a_file_at_the_default_bound(tmp_path):
    """Through `read_traffic` (1 MiB reads) with the 8 MiB default: a 40 MiB line costs about
    the bound, not the line."""
    path = tmp_path / "t.jsonl"
    with path.open("wb") as handle:
        for piece in chunks_of_one_line(40 * MIB, b"y" * MIB):
            handle.write(piece)
    tracemalloc.start()
    try:
        traffic = read_traffic(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert traffic.first_bad == (1, f"line 1: longer than {8 * MIB} bytes; skipped")
    assert len(traffic.records) == 1 and peak < 20 * MIB, f"peak {peak / MIB:.1f} MiB"


def test_200k_lines_parse_in_bounded_time(tmp_path):
    line = json.dumps({"messages": [{"role": "system", "content": "You are helpful."},
                                    {"role": "user", "content": "Summarize this text. " * 8}],
                       "completion": "The text says that " * 12}).encode() + b"\n"
    path = tmp_path / "big.jsonl"
    path.write_bytes(line * 200_000)
    start = time.perf_counter()
    traffic = read_traffic(path)
    seconds = time.perf_counter() - start
    assert len(traffic.records) == 200_000 and traffic.skipped == 0
    print(f"200k chat lines ({path.stat().st_size / MIB:.0f} MiB): {seconds:.1f} s, "
          f"{200_000 / seconds:.0f} lines/s")
    assert seconds < 60, seconds  # about 10 s measured on the 2-core dev machine


# --- valid entries of every format, and the records they hold ------------------------------

TEXT = st.text(max_size=30)
IDS = st.lists(st.integers(0, 2 ** 31 - 1), max_size=12).map(tuple)
MESSAGES = st.lists(st.builds(lambda role, content: {"role": role, "content": content},
                              st.sampled_from(["system", "user", "assistant", "tool"]), TEXT),
                    min_size=1, max_size=5).map(tuple)
PARTS = st.lists(TEXT, min_size=1, max_size=3)
"""A message's content as OpenAI text parts, which come back joined with "\\n"."""
SHAREGPT_ROLES = {"system": "system", "human": "user", "user": "user", "gpt": "assistant",
                  "assistant": "assistant"}


@st.composite
def entry(draw: st.DrawFn) -> tuple[dict[str, Any], list[TrafficRecord]]:
    """One valid JSONL entry and its records (line 0: the caller numbers them)."""
    kind = draw(st.sampled_from(["plain", "chat", "openai_chat", "openai_completion",
                                 "sharegpt"]))
    ids = draw(st.one_of(st.none(), IDS)), draw(st.one_of(st.none(), IDS))
    extra = {name: list(value) for name, value in zip(
        ("prompt_token_ids", "completion_token_ids"), ids, strict=True) if value is not None}
    if kind in ("plain", "chat"):
        prompt, completion = draw(TEXT), draw(TEXT)
        messages = draw(MESSAGES) if kind == "chat" else None
        obj = ({"messages": list(messages)} if messages else {"prompt": prompt})
        if messages and draw(st.booleans()):
            parts = draw(PARTS)
            obj["messages"] = [{"role": "user",
                                "content": [{"type": "text", "text": t} for t in parts]}]
            messages = ({"role": "user", "content": "\n".join(parts)},)
        answered = bool(completion or ids[1])  # an empty answer without its ids: no answer
        return ({**obj, "completion": completion, **extra},
                [TrafficRecord(0, None if messages else prompt, messages, completion, *ids)]
                if answered else [])
    if kind == "sharegpt":
        turns = draw(st.lists(st.tuples(st.sampled_from(sorted(SHAREGPT_ROLES)), TEXT),
                              min_size=1, max_size=6))
        history = tuple({"role": SHAREGPT_ROLES[who], "content": text} for who, text in turns)
        records = [TrafficRecord(0, None, history[:i], turn["content"])
                   for i, turn in enumerate(history)
                   if i and turn["role"] == "assistant" and turn["content"]]
        return ({"conversations": [{"from": who, "value": text} for who, text in turns]},
                records)
    choices = draw(st.lists(st.tuples(st.text(min_size=1, max_size=30), st.none() | IDS),
                            min_size=1, max_size=3))
    if kind == "openai_chat":
        messages = draw(MESSAGES)
        response = {"choices": [{"message": {"role": "assistant", "content": text},
                                 "token_ids": None if out is None else list(out)}
                                for text, out in choices]}
        if ids[0] is not None:
            response["prompt_token_ids"] = list(ids[0])
        return ({"request": {"messages": list(messages)}, "response": response},
                [TrafficRecord(0, None, messages, text, ids[0], out) for text, out in choices])
    prompt = draw(TEXT)
    response = {"choices": [{"text": text, "token_ids": None if out is None else list(out),
                             "prompt_token_ids": None if ids[0] is None else list(ids[0])}
                            for text, out in choices]}
    return ({"request": {"prompt": prompt}, "response": response},
            [TrafficRecord(0, prompt, None, text, ids[0], out) for text, out in choices])



VALID_LINE = entry().map(lambda pair: json.dumps(pair[0]))


@PROPERTY
@given(st.lists(st.binary(max_size=400) | VALID_LINE.map(str.encode), min_size=1, max_size=8),
       st.lists(st.integers(0, 1 << 16), max_size=8), st.booleans())
def test_arbitrary_bytes(pieces, cuts, small):
    """Random bytes between valid lines (so some records are read, and some lines are
    merged with garbage or cut)."""
    data = b"\n".join(pieces)
    bounds = SMALL if small else {}
    check_counts(within_bounds(lambda: parse_traffic_chunks(chunked(data, cuts), "t", **bounds)))


JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2 ** 40), 2 ** 40) | st.floats(allow_nan=False)
    | st.text(max_size=20) | st.sampled_from(["user", "assistant", "gpt", "human", "text"]),
    lambda inner: st.lists(inner, max_size=5)
    | st.dictionaries(st.sampled_from(KEYS) | st.text(max_size=5), inner, max_size=6),
    max_leaves=30)


@st.composite
def mutated(draw: st.DrawFn, line: str) -> str:
    """`line` with a few hostile fragments inserted, slices cut or repeated."""
    for _ in range(draw(st.integers(0, 4))):
        at = draw(st.integers(0, len(line)))
        op = draw(st.sampled_from(["insert", "cut", "repeat"]))
        if op == "insert":
            line = line[:at] + draw(st.sampled_from(HOSTILE)) + line[at:]
        elif op == "cut":
            line = line[:at] + line[at + draw(st.integers(0, 20)):]
        else:
            line = line[:at] + line[at:at + draw(st.integers(1, 30))] * draw(
                st.integers(1, 20)) + line[at:]
    return line


JSON_LINE = (JSON.map(json.dumps) | VALID_LINE).flatmap(
    lambda line: st.one_of(st.just(line), mutated(line)))


@PROPERTY
@given(st.lists(JSON_LINE, min_size=1, max_size=8), st.lists(st.integers(0, 1 << 16),
                                                              max_size=8), st.booleans())
def test_arbitrary_json_lines(lines, cuts, small):
    data = "\n".join(lines).encode("utf-8", "surrogatepass")
    bounds = SMALL if small else {}
    check_counts(within_bounds(lambda: parse_traffic_chunks(chunked(data, cuts), "t", **bounds)))


@PROPERTY
@given(st.lists(JSON | entry().map(lambda pair: pair[0]), max_size=6).map(json.dumps)
       .flatmap(lambda text: st.one_of(st.just(text), mutated(text))), st.booleans())
def test_arbitrary_sharegpt_arrays(text, small):
    data = text.encode("utf-8", "surrogatepass")
    bounds = SMALL if small else {}
    check_counts(within_bounds(lambda: parse_traffic_chunks([data], "s.json", **bounds)))


@PROPERTY
@given(st.lists(st.tuples(entry(), st.integers(0, 2)), min_size=1, max_size=8),
       st.lists(st.integers(0, 1 << 16), max_size=8))
def test_valid_records_round_trip(entries, cuts):
    lines: list[str] = []
    expected: list[TrafficRecord] = []
    bad: list[int] = []
    for (obj, records), blanks in entries:
        lines.extend([""] * blanks)  # blank lines: counted in line numbers, not entries
        lines.append(json.dumps(obj))
        expected.extend(replace(record, line=len(lines)) for record in records)
        if not records:
            bad.append(len(lines))
    data = "\n".join(lines).encode()
    traffic = within_bounds(lambda: parse_traffic_chunks(chunked(data, cuts), "t"))
    if not expected:
        assert traffic is None
        return
    assert traffic is not None
    assert list(traffic.records) == expected
    assert (traffic.entries, traffic.skipped) == (len(entries), len(bad))
    assert (traffic.first_bad or (None,))[0] == (bad[0] if bad else None)

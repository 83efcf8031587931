"""A traffic file (logged requests and what the model answered) -> `TrafficRecord`s.

`vllm-specdec whatif` replays an operator's own traffic, so it reads the logs people already
have: JSONL, one request a line, as `{"prompt", "completion"}`, `{"messages", "completion"}`,
an OpenAI `{"request", "response"}` pair (chat and completions, with vLLM's `return_token_ids`
ids where logged) or a ShareGPT conversation; or a ShareGPT JSON array. JSONL is streamed line
by line, each line bounded; a bad line is skipped and counted, never raised; a whole-file
problem is a `TrafficError`, one line naming the file and the fix. Bounds: `core/limits.py`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from vllm_specdec_plugin.core.errors import SpecDecodeConfigError, quote_value
from vllm_specdec_plugin.core.limits import (
    MAX_SHAREGPT_BYTES,
    MAX_TRAFFIC_BYTES,
    MAX_TRAFFIC_LINE_BYTES,
    MAX_TRAFFIC_REQUESTS,
    MIB,
)
from vllm_specdec_plugin.inputs.files import NotRegularFile, local_path, open_regular
from vllm_specdec_plugin.inputs.parsers import load_json
from vllm_specdec_plugin.inputs.traffic_records import BadEntry, TrafficRecord, records_of

__all__ = ["TrafficError", "TrafficFile", "TrafficRecord", "TrafficStream", "open_traffic",
           "parse_traffic_chunks", "read_traffic", "stream_traffic"]

SHAPES = ('each line must be {"prompt", "completion"}, {"messages", "completion"}, '
          '{"request", "response"} or a ShareGPT conversation')
_JSON_FIX = "write one JSON object per line"
_FIX = "give the path of a JSONL or ShareGPT JSON traffic file"
_WHITESPACE = b" \t\r\n"


class TrafficError(SpecDecodeConfigError):
    """The traffic file as a whole cannot be replayed (missing, empty, unreadable, no usable
    request): one line naming the file, the problem and the fix; `whatif` exits 2."""


@dataclass(frozen=True)
class TrafficFile:
    """What a traffic file held: its records in file order, and what was skipped and why."""

    records: tuple[TrafficRecord, ...]
    format: str
    """"jsonl" or "sharegpt" (one JSON array)."""
    entries: int
    """Non-empty lines (JSONL) or conversations (ShareGPT) read."""
    skipped: int
    first_bad: tuple[int, str] | None
    """The first skipped entry: its number and why ('line 7: "completion" is missing')."""
    truncated: bool
    """Reading stopped before the end (`stop_reason` says why)."""
    stop_reason: str | None = None
    requests_read: int = 0
    """Records read (`records` holds them unless they were streamed: `TrafficStream`)."""


class _Reader:
    """Entries -> records, counting entries and bad ones, up to the request cap."""

    def __init__(self, source: str, cap: int, unit: str, why_cap: str) -> None:
        self.source, self.cap, self.unit, self.why_cap = source, cap, unit, why_cap
        self.records: list[TrafficRecord] = []
        """The records of the last entry, not yet handed on (`TrafficStream` drains them)."""
        self.read = 0
        """Records read so far."""
        self.entries = self.skipped = 0
        self.first_bad: tuple[int, str] | None = None
        self.stop_reason: str | None = None

    def bad(self, number: int, why: str) -> None:
        self.skipped += 1
        if self.first_bad is None:
            self.first_bad = (number, f"{self.unit} {number}: {why}")

    def full(self) -> bool:
        """Whether the cap is reached (asked before each entry, so a file of exactly the cap
        is not called truncated)."""
        if self.read >= self.cap:
            self.stop_reason = f"stopped at {self.cap} requests ({self.why_cap})"
        return self.stop_reason is not None

    def add(self, number: int, value: object) -> None:
        self.entries += 1
        try:
            records = records_of(value, number)
        except BadEntry as exc:
            self.bad(number, str(exc))
            return
        room = self.cap - self.read
        if len(records) > room:  # a conversation's later turns past the cap
            del records[room:]
            self.stop_reason = f"stopped at {self.cap} requests ({self.why_cap})"
        self.records.extend(records)
        self.read += len(records)

    def result(self, fmt: str, records: tuple[TrafficRecord, ...] = ()) -> TrafficFile:
        """The file's counts with `records` (what the caller kept of what was read); one
        `TrafficError` line where nothing usable was read."""
        if not self.read:
            bad = f" (first bad: {self.first_bad[1]})" if self.first_bad else ""
            units = self.unit if self.entries == 1 else f"{self.unit}s"
            raise TrafficError(f"{self.source}: no usable request in {self.entries} {units}"
                               f"{bad}; {SHAPES}")
        return TrafficFile(records, fmt, self.entries, self.skipped, self.first_bad,
                           self.stop_reason is not None, self.stop_reason, self.read)


def _lines(chunks: Iterable[bytes], limit: int, cut: list[bool]) -> Iterator[bytes | None]:
    """The lines of a byte stream; None for a line over `limit` bytes, which is skipped
    chunk by chunk (never joined), so memory stays within `limit` plus one chunk. The last
    line is dropped when the stream was cut (`cut[0]`): it is a fragment."""
    parts: list[bytes] = []
    held = 0
    over = False
    for chunk in chunks:
        start = 0
        while (end := chunk.find(b"\n", start)) >= 0:
            piece = chunk[start:end]
            if over or held + len(piece) > limit:
                yield None
            else:
                yield b"".join((*parts, piece)) if parts else piece
            parts, held, over, start = [], 0, False, end + 1
        rest = chunk[start:]
        if not over and held + len(rest) > limit:
            parts, held, over = [], 0, True
        elif not over and rest:
            parts.append(rest)
            held += len(rest)
    if (over or parts) and not cut[0]:
        yield None if over else b"".join(parts)


def _capped(chunks: Iterable[bytes], limit: int, state: list[bool]) -> Iterator[bytes]:
    """At most `limit` bytes of `chunks`; `state[0]` set when more were there."""
    total = 0
    for chunk in chunks:
        if total + len(chunk) > limit:
            state[0] = True
            yield chunk[: limit - total]
            return
        total += len(chunk)
        yield chunk


class TrafficStream:
    """A traffic file given as a stream of byte chunks, its records read as they are consumed
    (`iter`), so a 4 GiB file is never held: `whatif` tokenizes them as they come, and stops
    reading where tokenizing stops. `file()` gives the counts of what was read; iterating
    raises the whole-file `TrafficError`s (empty, a bad ShareGPT array)."""

    def __init__(self, chunks: Iterable[bytes], source: str, max_requests: int | None = None,
                 *, max_bytes: int = MAX_TRAFFIC_BYTES,
                 max_line_bytes: int = MAX_TRAFFIC_LINE_BYTES,
                 max_sharegpt_bytes: int = MAX_SHAREGPT_BYTES) -> None:
        if max_requests is not None and max_requests < 1:
            raise TrafficError(f"--max-requests {max_requests} is not a request count; give 1 "
                               "or more")
        given = max_requests is not None and max_requests <= MAX_TRAFFIC_REQUESTS
        cap = max_requests if given and max_requests else MAX_TRAFFIC_REQUESTS
        self.chunks, self.source = chunks, source
        self.limits = (max_bytes, max_line_bytes, max_sharegpt_bytes)
        self.reader = _Reader(source, cap, "line",
                              "--max-requests" if given else "the bound on one file")
        self.format = "jsonl"

    def file(self, records: tuple[TrafficRecord, ...] = ()) -> TrafficFile:
        """What was read so far, with `records` (those the caller kept)."""
        return self.reader.result(self.format, records)

    def __iter__(self) -> Iterator[TrafficRecord]:
        reader = self.reader
        for _ in self._entries():
            yield from reader.records
            reader.records.clear()

    def _entries(self) -> Iterator[None]:
        """Reads entry by entry into `reader.records`, one yield per entry."""
        max_bytes, max_line_bytes, max_sharegpt_bytes = self.limits
        source, reader = self.source, self.reader
        cut = [False]
        stream = iter(_capped(self.chunks, max_bytes, cut))
        first, blank_lines = b"", 0
        for number, chunk in enumerate(stream):  # the first non-space byte "[": ShareGPT JSON
            if number == 0 and chunk.startswith(b"\xef\xbb\xbf"):  # a UTF-8 byte order mark
                chunk = chunk[3:]
            if stripped := chunk.lstrip(_WHITESPACE):
                first = chunk
                break
            blank_lines += chunk.count(b"\n")  # dropped, only counted: a blank line is nothing
        if not first:
            raise TrafficError(f"{source} is empty; {SHAPES}")
        rest = (chunk for part in ((first,), stream) for chunk in part)
        if stripped[:1] == b"[":
            self.format, reader.unit = "sharegpt", "conversation"
            yield from _sharegpt(rest, source, reader, max_sharegpt_bytes)
            return
        for number, line in enumerate(_lines(rest, max_line_bytes, cut), 1 + blank_lines):
            if line is not None and not line.strip():
                continue
            if reader.full():
                break
            if line is None:
                reader.entries += 1
                reader.bad(number, f"longer than {max_line_bytes} bytes; skipped")
                continue
            try:
                value = load_json(line.decode("utf-8"), "the text", _JSON_FIX, max_line_bytes)
            except UnicodeDecodeError as exc:
                reader.entries += 1
                reader.bad(number, f"not UTF-8 (byte 0x{line[exc.start]:02x} at offset "
                                   f"{exc.start})")
                continue
            except SpecDecodeConfigError as exc:
                reader.entries += 1
                reader.bad(number, exc.message.removesuffix(f"; {_JSON_FIX}"))
                continue
            reader.add(number, value)
            yield None
        if cut[0] and reader.stop_reason is None:
            reader.stop_reason = (f"stopped after {max_bytes / MIB:g} MiB (the bound on a "
                                  "traffic file); the rest was not read")


def parse_traffic_chunks(chunks: Iterable[bytes], source: str, max_requests: int | None = None,
                         **limits: int) -> TrafficFile:
    """A traffic file given as a stream of byte chunks (`source` names it in messages), every
    record held (`TrafficStream`'s limits as keywords)."""
    stream = TrafficStream(chunks, source, max_requests, **limits)
    return stream.file(tuple(stream))


def _sharegpt(chunks: Iterable[bytes], source: str, reader: _Reader,
              limit: int) -> Iterator[None]:
    """A ShareGPT JSON array: parsed whole, so bounded by `limit` bytes; one yield per
    conversation read into `reader`."""
    fix = ("a file that starts with '[' is read as one ShareGPT JSON array; write it as JSONL "
           "(one conversation a line: jq -c '.[]' FILE > FILE.jsonl) to stream it")
    data = b"".join(_capped(chunks, limit, cut := [False]))
    if cut[0]:
        raise TrafficError(f"{source} is a JSON array of more than {limit / MIB:g} MiB; {fix}")
    try:
        value = load_json(data.decode("utf-8"), source, fix, limit)
    except UnicodeDecodeError as exc:
        raise TrafficError(f"{source} is not UTF-8 (byte 0x{data[exc.start]:02x} at offset "
                           f"{exc.start}); {fix}") from None
    except SpecDecodeConfigError as exc:
        raise TrafficError(exc.message) from None
    for number, conversation in enumerate(value, 1):
        if reader.full():
            break
        reader.add(number, conversation)
        yield None


def _chunks(handle: BinaryIO, progress: Callable[[int, int], None] | None = None,
            size: int = MIB) -> Iterator[bytes]:
    """The file in `size`-byte chunks; `progress(chunks read, chunks in the file)` after each."""
    total = max(1, -(-os.fstat(handle.fileno()).st_size // size)) if progress else 0
    done = 0
    while chunk := handle.read(size):
        yield chunk
        if progress is not None:
            done += 1
            progress(done, max(total, done))


def read_traffic(path: str | Path, max_requests: int | None = None,
                 progress: Callable[[int, int], None] | None = None) -> TrafficFile:
    """The traffic file at `path` (JSONL or ShareGPT JSON), at most `max_requests` records,
    every one held; `progress(MiB read, MiB in the file)` as it is read."""
    with open_traffic(path) as handle:
        stream = _stream(handle, path, max_requests, progress)
        return stream.file(tuple(_reading(stream, path)))


@contextmanager
def stream_traffic(path: str | Path, max_requests: int | None = None,
                   progress: Callable[[int, int], None] | None = None
                   ) -> Iterator[tuple[TrafficStream, Iterator[TrafficRecord]]]:
    """The traffic file at `path` opened as a `TrafficStream` and its records, read as they
    are consumed (while the file is open); `progress(MiB read, MiB in the file)`."""
    with open_traffic(path) as handle:
        stream = _stream(handle, path, max_requests, progress)
        yield stream, _reading(stream, path)


def _stream(handle: BinaryIO, path: str | Path, max_requests: int | None,
            progress: Callable[[int, int], None] | None) -> TrafficStream:
    return TrafficStream(_chunks(handle, progress), f"--traffic {_shown(path)}", max_requests)


def _reading(stream: TrafficStream, path: str | Path) -> Iterator[TrafficRecord]:
    """The stream's records, an `OSError` while reading as one `TrafficError` line."""
    try:
        yield from stream
    except OSError as exc:
        raise TrafficError(f"--traffic {_shown(path)} cannot be read "
                           f"({exc.strerror or exc}); {_FIX}") from None


def open_traffic(path: str | Path) -> BinaryIO:
    """The traffic file opened for reading, else one `TrafficError` line: nothing there, a
    directory, a FIFO, socket or device (refused before any read: a FIFO without a writer
    would wait forever), unreadable. Cheap: `whatif` calls it before its expensive stages."""
    shown = _shown(path)
    try:
        found = local_path(str(path), "--traffic")
    except SpecDecodeConfigError as exc:
        raise TrafficError(exc.message) from None
    if found is None:
        raise TrafficError(f"--traffic {shown} does not exist; {_FIX}")
    try:
        return open_regular(found)
    except NotRegularFile as exc:
        save = "" if exc.kind == "a directory" else " (save what it streams to a file first)"
        raise TrafficError(f"--traffic {shown} is {exc.kind}; {_FIX}{save}") from None
    except OSError as exc:
        raise TrafficError(f"--traffic {shown} cannot be read ({exc.strerror or exc}); "
                           f"{_FIX}") from None


def _shown(path: str | Path) -> str:
    return quote_value(str(path), 200)

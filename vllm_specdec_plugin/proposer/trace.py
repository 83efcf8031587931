"""A record of the adaptive proposer's scored candidates, for replaying its acceptance model.

`VLLM_SPECDEC_ADAPTIVE_TRACE=PATH` makes the proposer append one JSON list per scored candidate:

    [cycle, rows, request uid, source, strength band, previous full, drafted, hits, misses,
     emitted, live prediction]

(`rows`: the batch size; `drafted`: tokens of it that were sent, 0 for a shadow candidate;
`hits`/`misses`: its outcome against the `emitted` tokens; `live prediction`: the calibrated
accepted tokens the plan counted on, 0 for a shadow candidate). `replay` feeds such a record
through `acceptance.py` in order and returns, per drafted candidate, what the model predicted
before it saw the outcome and what was realised, which is what the replay tests check.
At most `AdaptiveParams.max_trace_records` lines are written. The file is opened once, for
appending, without following a symbolic link at its path (`O_NOFOLLOW`; one warning, then no
trace) and only if it is a regular file; one worker writes it (`stats.for_this_worker`).
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import IO, Any

from vllm_specdec_plugin.proposer.acceptance import (
    Calibration,
    PooledAcceptance,
    RowEvidence,
    token_values,
)
from vllm_specdec_plugin.proposer.params import ADAPTIVE_PARAMS, AdaptiveParams
from vllm_specdec_plugin.proposer.stats import FILE_MODE


class TraceWriter:
    """Appends trace lines to a file (opened once; errors stop the trace, not the proposer)."""

    def __init__(self, out: IO[str],
                 max_records: int = ADAPTIVE_PARAMS.max_trace_records) -> None:
        self._out: IO[str] | None = out
        self.records = 0
        self.max_records = max_records

    @classmethod
    def open(cls, path: str | None, logger: Any,
             max_records: int = ADAPTIVE_PARAMS.max_trace_records) -> TraceWriter | None:
        if not path:
            return None
        try:
            return cls(open_for_append(path), max_records)
        except OSError as exc:
            why = "a symbolic link, not followed" if os.path.islink(path) else str(exc)
            logger.warning("adaptive proposer trace %s not written: %s", path, why)
            return None

    def write(self, cycle: int, rows: int, uid: int, source: str, candidate: Any, hits: int,
              misses: int, emitted: int) -> None:
        if self._out is None:
            return
        try:
            self._out.write(json.dumps([cycle, rows, uid, source, candidate.band, candidate.full,
                                        candidate.drafted, hits, misses, emitted,
                                        round(candidate.calibrated, 4)]) + "\n")
            self.records += 1
            if self.records >= self.max_records:
                self._out.close()
                self._out = None
        except OSError:
            self._out = None


def open_for_append(path: str) -> IO[str]:
    """`path` opened to append lines (created `FILE_MODE`), never through a link, never a FIFO or
    device: line-buffered, as vLLM's workers may be killed and a trace is for diagnosis."""
    flags = (os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK
             | getattr(os, "O_CLOEXEC", 0))
    fd = os.open(path, flags, FILE_MODE)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(f"{path} is not a regular file")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "a", buffering=1)
    except BaseException:
        os.close(fd)
        raise


@dataclass(frozen=True)
class Record:
    cycle: int
    rows: int
    uid: int
    source: str
    band: int
    full: bool
    drafted: int
    hits: int
    misses: int
    emitted: int
    live: float
    """What the proposer itself predicted (calibrated) when it drafted this candidate."""


def read(lines: Iterable[str]) -> Iterator[Record]:
    for line in lines:
        if line.strip():
            v = json.loads(line)
            yield Record(int(v[0]), int(v[1]), int(v[2]), str(v[3]), int(v[4]), bool(v[5]),
                         int(v[6]), int(v[7]), int(v[8]), int(v[9]),
                         float(v[10]) if len(v) > 10 else 0.0)


@dataclass(frozen=True)
class Prediction:
    cycle: int
    rows: int
    source: str
    drafted: int
    predicted: float
    """Expected accepted tokens of the drafted prefix, as the model said before the outcome."""
    realised: int


def replay(records: Iterable[Record], calibrate: bool = True, pooled: bool = True,
           k: int = 16, params: AdaptiveParams = ADAPTIVE_PARAMS) -> list[Prediction]:
    """Feed `records` through the acceptance model in order; a prediction per drafted one.

    `calibrate=False` leaves out the per-source calibration, `pooled=False` replaces the pooled
    rates by a single prior per source (the old policy's shape), to show what each layer buys.
    """
    table = PooledAcceptance(params)
    calibration = Calibration(params)
    rows: dict[int, RowEvidence] = {}
    out: list[Prediction] = []
    for r in records:
        evidence = rows.setdefault(r.uid, RowEvidence(params))
        key = (r.source, r.band, r.full) if pooled else (r.source, 0, False)
        if r.drafted:
            raw = sum(token_values(table.rates(key), evidence.factor(r.source),
                                   min(r.drafted, k), params=params))
            factor = calibration.factor(r.source) if calibrate else 1.0
            realised = min(r.emitted - 1, r.drafted)
            out.append(Prediction(r.cycle, r.rows, r.source, r.drafted, factor * raw, realised))
            calibration.observe(r.source, raw, realised)
        expected = table.observe(key, r.hits, r.misses)
        evidence.observe(r.source, r.hits, expected, full=not r.misses)
    return out

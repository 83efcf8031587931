"""What a running server chose and whether speculation pays, read from its `/metrics` text.

Pure: Prometheus text in, figures and a verdict out (`cli/status.py` fetches and prints). The
figures follow vLLM's own definitions (`vllm/v1/spec_decode/metrics.py`): acceptance rate =
accepted / draft tokens; mean acceptance length = 1 + accepted / drafts (the bonus token
included); per-position acceptance = accepted at position i / drafts.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass, field, replace

from vllm_specdec_plugin.core.limits import MAX_COUNTER, MAX_POSITIONS, ascii_decimal, printable
from vllm_specdec_plugin.core.types import DECISION_METRIC, METHOD_NONE, SOURCE_PREFILL_ONLY

DRAFTS = "vllm:spec_decode_num_drafts_total"
DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens_total"
ACCEPTED = "vllm:spec_decode_num_accepted_tokens_total"
ACCEPTED_PER_POSITION = "vllm:spec_decode_num_accepted_tokens_per_pos_total"
GENERATION_TOKENS = "vllm:generation_tokens_total"
# Below this acceptance rate most draft tokens are verified for nothing; the README's
# measurements put break-even near 0.2 at batch 4 and 0.45 at batch 16. Shared with the alert.
LOW_ACCEPTANCE = 0.2
LOAD_SENSITIVE_ACCEPTANCE = 0.45


@dataclass(frozen=True)
class Sample:
    """One line of the Prometheus text format."""

    name: str
    labels: Mapping[str, str]
    value: float


def parse_metrics(text: str) -> list[Sample]:
    """The samples of a Prometheus text exposition; comments and malformed lines are skipped."""
    return list(iter_metrics(text))


def iter_metrics(text: str) -> Iterator[Sample]:
    """The same, one sample at a time (a 16 MiB response is never held as objects)."""
    start = 0
    while start < len(text):
        end = text.find("\n", start)
        end = len(text) if end == -1 else end
        line, start = text[start:end].strip(), end + 1
        if not line or line.startswith("#"):
            continue
        try:
            yield _parse_line(line)
        except ValueError:
            continue


def _parse_line(line: str) -> Sample:
    brace = line.find("{")
    space = line.find(" ")
    if brace != -1 and (space == -1 or brace < space):
        name = line[:brace]
        labels, rest = _parse_labels(line, brace + 1)
    else:
        if space == -1:
            raise ValueError(line)
        name, labels, rest = line[:space], {}, line[space:]
    fields = rest.split()
    if not name or not fields:
        raise ValueError(line)
    return Sample(name, labels, float(fields[0]))  # a trailing timestamp is ignored


def _parse_labels(line: str, pos: int) -> tuple[dict[str, str], str]:
    labels: dict[str, str] = {}
    while True:
        while pos < len(line) and line[pos] in " ,":
            pos += 1
        if pos < len(line) and line[pos] == "}":
            return labels, line[pos + 1:]
        eq = line.find("=", pos)
        if eq == -1 or eq + 1 >= len(line) or line[eq + 1] != '"':
            raise ValueError(line)
        key, value, pos = line[pos:eq].strip(), [], eq + 2
        while pos < len(line) and line[pos] != '"':
            if line[pos] == "\\" and pos + 1 < len(line):
                pos += 1
                value.append({"n": "\n"}.get(line[pos], line[pos]))
            else:
                value.append(line[pos])
            pos += 1
        if pos >= len(line):
            raise ValueError(line)
        labels[key] = "".join(value)
        pos += 1


@dataclass(frozen=True)
class Counters:
    """One scrape's cumulative figures, or the difference of two scrapes (a window)."""

    decision: Mapping[str, str] | None
    """The labels of `vllm_specdec_decision_info` (None: the plugin exported no decision)."""
    speculation: bool
    """Whether vLLM exports spec-decode counters (it does only with a speculative config)."""
    engine_stats: bool
    """Whether vLLM exports engine statistics at all (not with --disable-log-stats)."""
    drafts: float = 0.0
    draft_tokens: float = 0.0
    accepted_tokens: float = 0.0
    per_position: tuple[float, ...] = field(default_factory=tuple)
    generation_tokens: float = 0.0


def read_counters(samples: Iterable[Sample]) -> Counters:
    """The figures `status` needs from one scrape, summed over engines and models (one pass,
    so `samples` may be `iter_metrics`)."""
    totals: dict[str, float] = {}
    positions: dict[int, float] = {}
    names: set[str] = set()
    decision = None
    for sample in samples:
        names.add(sample.name)
        if sample.name == DECISION_METRIC and sample.value == 1:
            decision = dict(sample.labels)
        elif not math.isfinite(sample.value) or abs(sample.value) > MAX_COUNTER:
            continue  # a NaN, infinite or absurd counter tells nothing to add up
        elif sample.name == ACCEPTED_PER_POSITION:
            # ASCII digits below MAX_POSITIONS only: "100000000000" would size the list
            index = ascii_decimal(sample.labels.get("position", ""), max_digits=6)
            if index is not None and index < MAX_POSITIONS:
                positions[index] = positions.get(index, 0.0) + sample.value
        else:
            totals[sample.name] = totals.get(sample.name, 0.0) + sample.value
    return Counters(
        decision=decision,
        speculation=DRAFTS in names,
        engine_stats=any(name.startswith("vllm:") for name in names),
        drafts=totals.get(DRAFTS, 0.0),
        draft_tokens=totals.get(DRAFT_TOKENS, 0.0),
        accepted_tokens=totals.get(ACCEPTED, 0.0),
        per_position=tuple(positions.get(i, 0.0) for i in range(max(positions, default=-1) + 1)),
        generation_tokens=totals.get(GENERATION_TOKENS, 0.0),
    )


def window(new: Counters, old: Counters) -> Counters:
    """The counters' increase from `old` to `new`; a restarted server counts from zero."""
    pairs = [(new.drafts, old.drafts), (new.draft_tokens, old.draft_tokens),
             (new.accepted_tokens, old.accepted_tokens),
             (new.generation_tokens, old.generation_tokens)]
    if any(now < before for now, before in pairs) or len(new.per_position) < len(old.per_position):
        return new  # a counter went down: the server restarted, everything counts from zero
    old_positions = old.per_position + (0.0,) * (len(new.per_position) - len(old.per_position))
    return replace(
        new,
        drafts=new.drafts - old.drafts,
        draft_tokens=new.draft_tokens - old.draft_tokens,
        accepted_tokens=new.accepted_tokens - old.accepted_tokens,
        per_position=tuple(a - b for a, b in zip(new.per_position, old_positions, strict=True)),
        generation_tokens=new.generation_tokens - old.generation_tokens,
    )


@dataclass(frozen=True)
class Status:
    """What `vllm-specdec status` reports (the --json keys, in order)."""

    decision: Mapping[str, str] | None
    drafts: int | None
    draft_tokens: int | None
    accepted_tokens: int | None
    acceptance_rate: float | None
    mean_acceptance_length: float | None
    per_position: list[float] | None
    verdict: str
    window_s: float | None = None
    """--watch only: the window the figures cover."""
    output_tokens_per_s: float | None = None
    """--watch only: output tokens per second over the window."""

    def to_json(self, indent: int | None = 2) -> str:
        data = asdict(self)
        if self.window_s is None:
            del data["window_s"], data["output_tokens_per_s"]
        return json.dumps(data, indent=indent)


def status_of(counters: Counters, window_s: float | None = None) -> Status:
    """Figures and verdict for cumulative counters, or for a window of `window_s` seconds."""
    rate_out = _finite(counters.generation_tokens / window_s) if window_s else None
    if not counters.speculation:
        return Status(counters.decision, None, None, None, None, None, None,
                      _verdict_without_speculation(counters), window_s, rate_out)
    drafts = counters.drafts
    rate = _finite(counters.accepted_tokens / counters.draft_tokens
                   if counters.draft_tokens else None)
    length = _finite(1 + counters.accepted_tokens / drafts if drafts else None)
    per_position = [round(_finite(a / drafts) or 0.0, 4)
                    for a in counters.per_position] if drafts else []
    return Status(
        decision=counters.decision,
        drafts=round(drafts),
        draft_tokens=round(counters.draft_tokens),
        accepted_tokens=round(counters.accepted_tokens),
        acceptance_rate=None if rate is None else round(rate, 4),
        mean_acceptance_length=None if length is None else round(length, 3),
        per_position=per_position,
        verdict=verdict(rate, length, window_s),
        window_s=window_s,
        output_tokens_per_s=None if rate_out is None else round(rate_out, 2),
    )


def _finite(value: float | None) -> float | None:
    """A figure fit to print and to write as JSON (a hostile server's counters can make a
    ratio overflow to infinity)."""
    return value if value is not None and math.isfinite(value) else None


def _verdict_without_speculation(counters: Counters) -> str:
    decision = counters.decision
    if decision is not None and decision.get("source") == SOURCE_PREFILL_ONLY:
        return ("prefill-only instance (disaggregated serving): no speculation here by design; "
                "check the decode instances")
    if decision is not None and decision.get("method") == METHOD_NONE:
        return (f"opted in, but serving WITHOUT speculative decoding "
                f"(source: {decision.get('source', '?')}); see the server's log")
    if not counters.engine_stats:
        return ("no engine statistics in /metrics (started with --disable-log-stats?); "
                "nothing to judge")
    return "no speculative decoding on this server (no vllm:spec_decode_* counters)"


def verdict(rate: float | None, length: float | None, window_s: float | None = None) -> str:
    """One line: does speculation pay, judged by its acceptance."""
    if rate is None or length is None:
        when = f"in the last {window_s:g} s" if window_s else "yet"
        return (f"speculation on, no drafts {when} (no traffic, or the load-aware schedule "
                "drafts nothing at this batch size)")
    if rate < LOW_ACCEPTANCE:
        return (f"acceptance {rate:.2f}: consider turning it off (most draft tokens are "
                "verified for nothing)")
    pays = f"speculation pays: {length:.1f} tokens per step (acceptance {rate:.2f})"
    if rate < LOAD_SENSITIVE_ACCEPTANCE:
        return pays + "; at high load it may not"
    return pays


def render_text(status: Status) -> str:
    """The human-readable report."""
    rows = [("decision", describe_decision(status.decision))]
    if status.window_s is not None:
        out = status.output_tokens_per_s
        rows.append(("window", f"last {status.window_s:.1f} s"
                     + ("" if out is None else f", {out:.1f} output tokens/s")))
    if status.drafts is not None:
        rows += [
            ("drafts", str(status.drafts)),
            ("draft tokens", str(status.draft_tokens)),
            ("accepted tokens", str(status.accepted_tokens)),
            ("acceptance rate", _number(status.acceptance_rate, "{:.1%}")),
            ("mean acceptance length", _number(status.mean_acceptance_length,
                                               "{:.2f} tokens per step")),
            ("per-position acceptance", " ".join(f"{p:.2f}" for p in status.per_position or [])
             or "-"),
        ]
    rows.append(("verdict", status.verdict))
    width = max(len(name) for name, _ in rows) + 1
    # Label values come from the server: control characters (ESC sequences) are escaped.
    return "\n".join(f"{name + ':':<{width}} {printable(value)}" for name, value in rows)


def describe_decision(decision: Mapping[str, str] | None) -> str:
    if decision is None:
        return "not exported (not opted in, or the plugin is not installed in the server)"
    method = decision.get("method", "?")
    tokens = decision.get("num_speculative_tokens")
    head = method if method == METHOD_NONE else f"{method} k={tokens}"
    details = [f"source {decision.get('source', '?')}"]
    details += [f"{key} {decision[key]}" for key in ("preset", "platform", "schedule")
                if decision.get(key)]
    return f"{head} ({', '.join(details)})"


def _number(value: float | None, pattern: str) -> str:
    return "-" if value is None or math.isnan(value) else pattern.format(value)


def iter_windows(scrapes: Iterator[tuple[float, Counters]]) -> Iterator[Status]:
    """--watch: one Status per consecutive pair of (time, counters) scrapes."""
    previous = next(scrapes, None)
    for current in scrapes:
        if previous is not None:
            span = current[0] - previous[0]
            yield status_of(window(current[1], previous[1]), window_s=span)
        previous = current

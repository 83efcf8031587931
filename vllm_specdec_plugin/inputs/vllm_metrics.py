"""The one reader of a vLLM server's `/metrics`: its text in, typed samples and figures out.

Everything that reads `/metrics` (`vllm-specdec status`, the benchmarks, the engine tests)
goes through here: the Prometheus text parser (`iter_metrics`), vLLM's spec-decode counter
names, the counters summed over engines (`read_counters`), labelled gauges (`gauge_values`,
for the plugin's own `vllm_specdec_*` gauges) and the acceptance formulas as vLLM defines them
(`vllm/v1/spec_decode/metrics.py`): acceptance rate = accepted / draft tokens; mean acceptance
length = 1 + accepted / drafts (the bonus token included); per-position acceptance = accepted
at position i / drafts. Pure: text in, values out; fetching is `cli/scrape.py`'s.

Why the parser is written here and not `prometheus_client.parser`'s (measured with
prometheus_client 0.26, CPU seconds on one core; `tests/unit/inputs/test_vllm_metrics.py`
checks that both read valid text alike):

- time at the 16 MiB response cap (`MAX_METRICS_BYTES`): vLLM-shaped lines 0.57 s here vs 1.79 s,
  short lines (`vllm:x 1`) 1.87 s vs 5.25 s, 4 KiB lines of labels 1.04 s vs 6.76 s;
- one long line costs the library quadratic time (its label scan re-slices the rest of the
  line per label): one line of labels, 256 KiB 0.02 s vs 0.19 s, 1 MiB 0.07 s vs 3.43 s, and
  16 MiB (one line under the cap) did not end within minutes (here 1.4 s);
- its parse stops at the first malformed line (a hostile or broken exporter loses every later
  sample) and renames samples under a `# TYPE x counter` line without `_total`;
- it is not a dependency of the plugin: `vllm-specdec status` runs where vLLM is not installed.

Keeping the library inside today's bounds would take a line-length cap, a restart per bad
line and comment lines withheld, and it would still be about three times slower at the cap.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass

from vllm_specdec_plugin.core.limits import MAX_COUNTER, MAX_POSITIONS, ascii_decimal, printable
from vllm_specdec_plugin.core.request_tokens import REQUESTS_METRIC, SPECULATION_LABELS
from vllm_specdec_plugin.core.step_cost import BucketCost
from vllm_specdec_plugin.core.types import DECISION_METRIC

SCHEDULE_PREFIX = "vllm_specdec_schedule_"
SCHEDULE_K = "vllm_specdec_schedule_k"
"""The k the schedule controller keeps per batch bucket (label `batch_bucket`)."""
SCHEDULE_GAIN = "vllm_specdec_schedule_gain"
"""Measured tokens/s of k against k=0 (labels `batch_bucket`, `k`; `_low`, `_high`, `_pairs`
beside it)."""
SCHEDULE_OVERHEAD = "vllm_specdec_schedule_overhead_us_per_step"
"""The controller's own microseconds per engine step."""
MAX_SCHEDULE_SAMPLES = 4096
"""Schedule gauge samples kept from one scrape (a hostile server cannot grow the report); the
step-cost gauges have as many again."""
STEP_COST_PREFIX = "vllm_specdec_step_cost_"
STEP_COST = "vllm_specdec_step_cost_seconds"
"""The controller's learned seconds of a decode step per batch bucket (labels `batch_bucket`,
`part`: `no_draft` a step without drafts, `switch` what a drafting step pays besides, `per_token`
each drafted token verified, all rows together): `core/step_cost.BucketCost`'s parts."""
STEP_COST_ROWS = "vllm_specdec_step_cost_rows"
"""The rows (batch size) the `no_draft` time was measured at (label `batch_bucket`)."""
STEP_COST_PARTS = {"no_draft": "no_draft_s", "switch": "switch_s", "per_token": "per_token_s"}
"""The `part` label's values and the `BucketCost` / snapshot field each one carries."""
STEP_COSTS_FORMAT = "vllm-specdec-step-costs/v1"
"""`status --json`'s `step_costs` object (`cli/status_figures.step_costs_of`), which
`vllm-specdec whatif --costs` reads."""

# vLLM's counters (vllm/v1/spec_decode/metrics.py, vllm/v1/metrics/loggers.py), as sampled.
DRAFTS = "vllm:spec_decode_num_drafts_total"
DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens_total"
ACCEPTED = "vllm:spec_decode_num_accepted_tokens_total"
ACCEPTED_PER_POSITION = "vllm:spec_decode_num_accepted_tokens_per_pos_total"
GENERATION_TOKENS = "vllm:generation_tokens_total"
PROMPT_TOKENS = "vllm:prompt_tokens_total"
VLLM_PREFIX = "vllm:"
"""Every engine statistic vLLM exports starts with this (none with --disable-log-stats)."""
SPEC_DECODE_PREFIX = "vllm:spec_decode"
"""vLLM's speculative-decoding counters all start with this."""


def offline_name(metric: str) -> str:
    """A counter's name as the offline `LLM.get_metrics()` reports it (without `_total`)."""
    return metric.removesuffix("_total")


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
    """The labels from `pos` (after the `{`) and the text after the `}`; linear in the line."""
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


def metric_sum(samples: Iterable[Sample], name: str) -> float:
    """The sum of `name`'s samples over every label set (engines, models, positions)."""
    return sum(sample.value for sample in samples if sample.name == name)


def counter_sums(samples: Iterable[Sample], names: Iterable[str]) -> dict[str, float]:
    """Each of `names` summed over its label sets, 0.0 for a name not exported (one pass)."""
    sums = dict.fromkeys(names, 0.0)
    for sample in samples:
        if sample.name in sums:
            sums[sample.name] += sample.value
    return sums


def gauge_values(samples: Iterable[Sample], name: str,
                 labels: Sequence[str]) -> dict[tuple[str, ...], float]:
    """A labelled gauge's values keyed by the values of `labels` ("" where one is missing),
    e.g. `gauge_values(samples, "vllm_specdec_schedule_k", ["batch_bucket"])`; a key sampled
    twice (one per API server) keeps the last."""
    return {tuple(sample.labels.get(label, "") for label in labels): sample.value
            for sample in samples if sample.name == name}


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
    """`vllm:spec_decode_num_drafts_total`: steps that drafted, summed over engines."""
    draft_tokens: float = 0.0
    """`vllm:spec_decode_num_draft_tokens_total`."""
    accepted_tokens: float = 0.0
    """`vllm:spec_decode_num_accepted_tokens_total`."""
    per_position: tuple[float, ...] = ()
    """`vllm:spec_decode_num_accepted_tokens_per_pos_total`, index = the `position` label."""
    generation_tokens: float = 0.0
    """`vllm:generation_tokens_total` (output tokens)."""
    schedule: tuple[tuple[str, int, tuple[tuple[int, ScheduleGain], ...]], ...] = ()
    """The schedule controller's gauges: per batch bucket ("1-1", "2-3", ...), the k in force
    and the measured gains against k=0 (`vllm_specdec_schedule_*`)."""
    step_costs: tuple[tuple[str, BucketCost], ...] = ()
    """The controller's learned step costs per batch bucket ("1-1", ...), smallest first, each
    complete (every part and the rows) and non-negative (`vllm_specdec_step_cost_*`)."""
    requests: tuple[float, ...] = ()
    """`vllm_specdec_requests_total` per `speculation` label, in
    `core.request_tokens.SPECULATION_LABELS` order (on, off, capped); empty: not exported."""


@dataclass(frozen=True)
class ScheduleGain:
    """`vllm_specdec_schedule_gain{batch_bucket,k}` and the gauges beside it."""

    ratio: float
    """Measured tokens/s of this k against k=0 in the bucket."""
    low: float | None
    """Low end of its 90% interval (None before two paired blocks)."""
    high: float | None
    """High end of its 90% interval."""
    pairs: int
    """Paired blocks behind it."""


def _schedule(values: Mapping[tuple[str, str], float]
              ) -> tuple[tuple[str, int, tuple[tuple[int, ScheduleGain], ...]], ...]:
    """(bucket, k in force, ((k, gain), ...)) per batch bucket, smallest bucket first, from
    the schedule gauges gathered by `read_counters` (keyed (metric suffix, "bucket|k"))."""
    buckets: dict[str, int] = {}
    gains: dict[str, dict[int, dict[str, float]]] = {}
    for (suffix, key), value in values.items():
        label, _, k_text = key.partition("|")
        if suffix == "k":
            buckets[label] = int(value)
            continue
        k = ascii_decimal(k_text, max_digits=3)
        if k is not None:
            gains.setdefault(label, {}).setdefault(k, {})[suffix] = value
    out = []
    for label in sorted(buckets, key=_low_end):
        cells = tuple((k, ScheduleGain(g["gain"], g.get("gain_low"), g.get("gain_high"),
                                       int(g.get("gain_pairs", 0))))
                      for k, g in sorted(gains.get(label, {}).items()) if "gain" in g)
        out.append((label, buckets[label], cells))
    return tuple(out)


def _low_end(label: str) -> int:
    """A batch bucket label's first batch size ("16-31" -> 16; 0 when it is not one)."""
    return ascii_decimal(label.split("-")[0], max_digits=9) or 0


def _step_costs(values: Mapping[tuple[str, str], float]
                ) -> tuple[tuple[str, BucketCost], ...]:
    """(bucket, cost) for every bucket whose gauges are all there (keyed (bucket, part or
    "rows")), smallest bucket first; a bucket with a part missing or rows below 1 is left out."""
    labels = sorted({label for label, _ in values}, key=_low_end)
    out = []
    for label in labels:
        parts = [values.get((label, part), math.nan) for part in (*STEP_COST_PARTS, "rows")]
        no_draft, switch, per_token, rows = parts
        if not math.isnan(sum(parts)) and rows >= 1.0:  # NaN: a part missing
            out.append((label, BucketCost(no_draft, switch, per_token, rows)))
    return tuple(out)


def read_counters(samples: Iterable[Sample]) -> Counters:
    """The figures `status` needs from one scrape, summed over engines and models (one pass,
    so `samples` may be `iter_metrics`)."""
    totals: dict[str, float] = {}
    positions: dict[int, float] = {}
    names: set[str] = set()
    schedule: dict[tuple[str, str], float] = {}
    costs: dict[tuple[str, str], float] = {}
    requests: dict[str, float] = {}
    decision = None
    for sample in samples:
        names.add(sample.name)
        if sample.name == DECISION_METRIC and sample.value == 1:
            decision = dict(sample.labels)
        elif sample.name.startswith(SCHEDULE_PREFIX):
            if math.isfinite(sample.value) and len(schedule) < MAX_SCHEDULE_SAMPLES:
                bucket = printable(sample.labels.get("batch_bucket", ""))[:32]
                key = f"{bucket}|{sample.labels.get('k', '')[:4]}"
                schedule[(sample.name[len(SCHEDULE_PREFIX):], key)] = sample.value
        elif sample.name.startswith(STEP_COST_PREFIX):
            # a cost is a finite non-negative number of seconds (or rows)
            if (0.0 <= sample.value <= MAX_COUNTER and len(costs) < MAX_SCHEDULE_SAMPLES
                    and sample.name in (STEP_COST, STEP_COST_ROWS)):
                bucket = printable(sample.labels.get("batch_bucket", ""))[:32]
                part = "rows" if sample.name == STEP_COST_ROWS else sample.labels.get("part", "")
                if part == "rows" or part in STEP_COST_PARTS:
                    costs[(bucket, part)] = sample.value
        elif not math.isfinite(sample.value) or abs(sample.value) > MAX_COUNTER:
            continue  # a NaN, infinite or absurd counter tells nothing to add up
        elif sample.name == REQUESTS_METRIC:
            label = sample.labels.get("speculation", "")
            if label in SPECULATION_LABELS and sample.value >= 0:
                requests[label] = requests.get(label, 0.0) + sample.value
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
        engine_stats=any(name.startswith(VLLM_PREFIX) for name in names),
        drafts=totals.get(DRAFTS, 0.0),
        draft_tokens=totals.get(DRAFT_TOKENS, 0.0),
        accepted_tokens=totals.get(ACCEPTED, 0.0),
        per_position=tuple(positions.get(i, 0.0) for i in range(max(positions, default=-1) + 1)),
        generation_tokens=totals.get(GENERATION_TOKENS, 0.0),
        schedule=_schedule(schedule),
        step_costs=_step_costs(costs),
        requests=tuple(requests.get(label, 0.0) for label in SPECULATION_LABELS)
        if requests else (),
    )


# --- the acceptance formulas: None where a figure is undefined (no drafts) or not finite ----

def acceptance_rate(accepted_tokens: float, draft_tokens: float) -> float | None:
    """Accepted / draft tokens."""
    return finite(accepted_tokens / draft_tokens) if draft_tokens else None


def mean_acceptance_length(accepted_tokens: float, drafts: float) -> float | None:
    """Tokens per drafting step: 1 + accepted / drafts (the bonus token included)."""
    return finite(1 + accepted_tokens / drafts) if drafts else None


def per_position_acceptance(accepted_per_position: Sequence[float],
                            drafts: float) -> list[float]:
    """Accepted at position i / drafts, for each position (0.0 where not finite); empty
    without drafts."""
    if not drafts:
        return []
    return [finite(accepted / drafts) or 0.0 for accepted in accepted_per_position]


def finite(value: float | None) -> float | None:
    """A figure fit to print and to write as JSON (a hostile server's counters can make a
    ratio overflow to infinity)."""
    return value if value is not None and math.isfinite(value) else None

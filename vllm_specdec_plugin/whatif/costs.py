"""`whatif --costs FILE`: the step costs a running engine learned, as a `StepCostCurve`.

A running engine's schedule controller learns what a decode step costs per batch bucket
(`core/step_cost.StepCostTable`) and exports it; this reads any of the forms it is found in:

- `vllm-specdec status --url URL --json` output: an object whose `step_costs` is the
  `vllm-specdec-step-costs/v1` object (`cli/status_figures.step_costs_of` documents it);
- a `status --watch S --json` stream, one object per line: its last line;
- the controller's snapshot file (`engine/schedule_report.snapshot`), whose `step_costs` is
  `StepCostTable.summary()` (keyed "rows>=N");
- the bare `step_costs` object of either form.

Every read is bounded (`inputs/files.read_bounded`, `inputs/parsers.load_json`, 1 MiB); every
bad input is one `CostsError` line naming the file, what is wrong and how to get a good one.
`fill_from_prior` completes a measured curve's missing buckets from a prior (`core/roofline.py`).
"""

from __future__ import annotations

import errno
import math
from pathlib import Path
from typing import Any

from vllm_specdec_plugin.core.errors import SpecDecodeConfigError, quote_value
from vllm_specdec_plugin.core.limits import (
    MAX_FIXED_TOKENS,
    MAX_STEP_SECONDS,
    MIN_STEP_SECONDS,
    ascii_decimal,
    decode_text,
)
from vllm_specdec_plugin.core.step_cost import (
    STEP_COST_DEFAULTS,
    BucketCost,
    StepCostCurve,
    bucket,
    bucket_bounds,
    bucket_label,
)
from vllm_specdec_plugin.inputs.files import NotRegularFile, read_regular
from vllm_specdec_plugin.inputs.parsers import load_json
from vllm_specdec_plugin.inputs.vllm_metrics import STEP_COSTS_FORMAT

MAX_COSTS_BYTES = 1 << 20
FIX = ("run `vllm-specdec status --url URL --json > costs.json` against an engine running the "
       "schedule controller")


class CostsError(SpecDecodeConfigError):
    """A `--costs` file that cannot be read as step costs (one line: the file, why, the fix)."""


def _refuse(path: str, problem: str, fix: str = FIX) -> CostsError:
    return CostsError(f"--costs {quote_value(path, 200)}: {problem}; {fix}")


def load_costs(path: str) -> StepCostCurve:
    """The step-cost curve in the file at `path` (any form of the module docstring); source
    "measured: PATH", every bucket measured."""
    try:
        data = read_regular(Path(path), MAX_COSTS_BYTES)
    except NotRegularFile as exc:  # a FIFO would wait for a writer: refused, never read
        raise _refuse(path, f"is {exc.kind}, not a regular file", "save the costs to a file "
                      "(`vllm-specdec status --url URL --json > costs.json`) and give its "
                      "path") from None
    except OSError as exc:
        fix = FIX if exc.errno != errno.EFBIG else (
            "keep a `status --watch` stream's last line (`tail -n 1 FILE > costs.json`), or "
            + FIX)
        raise _refuse(path, f"cannot be read ({exc.strerror or exc})", fix) from None
    try:
        text = decode_text(data, f"--costs {quote_value(path, 200)}", FIX)
        document = _document(text, path)
    except CostsError:
        raise
    except SpecDecodeConfigError as exc:  # the bounded reader's own refusal, one line
        raise CostsError(exc.message) from None
    costs = _step_costs(document, path)
    if isinstance(costs.get("buckets"), dict) or "format" in costs:
        buckets, fixed = _exported(costs, path)
    else:
        buckets, fixed = _summary(costs, path), STEP_COST_DEFAULTS.prior_fixed_tokens
    if not buckets:
        raise _refuse(path, "holds no measured bucket yet (no step without drafts was timed)",
                      "serve some traffic with the schedule controller on first, then " + FIX)
    return StepCostCurve(dict(sorted(buckets.items())), f"measured: {path}",
                         frozenset(buckets), fixed)


def _document(text: str, path: str) -> Any:
    """The one JSON document, or a watch stream's last line."""
    source, stripped = f"--costs {quote_value(path, 200)}", text.strip()
    if not stripped:
        raise _refuse(path, "is empty")
    lines = stripped.splitlines()
    if len(lines) > 1 and lines[-1].lstrip().startswith("{") and lines[0].rstrip().endswith("}"):
        # `status --watch S --json` prints one object per line: the last is the newest
        return load_json(lines[-1], f"{source} (its last line)", FIX, MAX_COSTS_BYTES)
    return load_json(stripped, source, FIX, MAX_COSTS_BYTES)


def _step_costs(document: Any, path: str) -> dict[str, Any]:
    """The step-cost object of any of the forms."""
    if not isinstance(document, dict):
        raise _refuse(path, f"holds a JSON {type(document).__name__}, not an object")
    if "step_costs" in document:
        found = document["step_costs"]
        if found is None or found == {}:
            raise _refuse(path, "has no step costs (the engine runs no schedule controller, or "
                                "has not timed a step yet)")
        if not isinstance(found, dict):
            raise _refuse(path, f"its step_costs is a {type(found).__name__}, not an object")
        return found
    if "format" in document or (document and all(str(k).startswith("rows>=") for k in document)):
        return document
    if "decision" in document or "verdict" in document:
        raise _refuse(path, "is `status` output without step costs (the server exports no "
                            "vllm_specdec_step_cost_* gauges: no schedule controller runs)")
    raise _refuse(path, "holds no step costs (no `step_costs`, `format` or `rows>=N` keys)")


def _number(value: Any, path: str, where: str, low: float, high: float, unit: str = "") -> float:
    """A finite number in [low, high]: physical ranges, refused by name (a step's seconds, a
    bucket's rows, tokens)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(
            value):
        shown = repr(value) if value is None or isinstance(value, (bool, float)) else \
            quote_value(value)
        raise _refuse(path, f"{where} must be a number, got {shown}")
    if not low <= value <= high:
        raise _refuse(path, f"{where} {value!r} is outside the physical range "
                            f"({low:g} to {high:g}{unit})")
    return float(value)


def _bucket_cost(cell: Any, path: str, where: str, key: int, default_rows: int | None
                 ) -> BucketCost:
    """One bucket's cost (bucket `key`); `default_rows` where the cell may leave its rows out.
    A step is at least `MIN_STEP_SECONDS` and every part at most `MAX_STEP_SECONDS`; the rows
    a bucket was measured at lie within its batch sizes."""
    if not isinstance(cell, dict):
        raise _refuse(path, f"{where} must be an object, got {quote_value(cell)}")
    low, high = bucket_bounds(key)
    seconds = {name: _number(cell.get(name), path, f"{where}.{name}",
                             MIN_STEP_SECONDS if name == "no_draft_s" else 0.0,
                             MAX_STEP_SECONDS, " seconds")
               for name in ("no_draft_s", "switch_s", "per_token_s")}
    # the engine's rows are a moving average of the bucket's batch sizes (rounding aside)
    rows = _number(cell.get("rows", default_rows), path, f"{where}.rows", low * (1 - 1e-9),
                   high * (1 + 1e-9), f" rows, the batch sizes of bucket {bucket_label(key)}")
    return BucketCost(seconds["no_draft_s"], seconds["switch_s"], seconds["per_token_s"], rows)


def _exported(costs: dict[str, Any], path: str) -> tuple[dict[int, BucketCost], float]:
    """The `vllm-specdec-step-costs/v1` form."""
    if costs.get("format") != STEP_COSTS_FORMAT:
        raise _refuse(path, f"step costs of format {quote_value(costs.get('format'))}, "
                            f"expected {STEP_COSTS_FORMAT!r}")
    fixed = _number(costs.get("fixed_tokens", STEP_COST_DEFAULTS.prior_fixed_tokens), path,
                    "fixed_tokens", 0.0, MAX_FIXED_TOKENS, " tokens")
    cells = costs.get("buckets")
    if not isinstance(cells, dict):
        raise _refuse(path, f"step_costs.buckets must be an object, got {quote_value(cells)}")
    buckets: dict[int, BucketCost] = {}
    for label, cell in cells.items():
        low = ascii_decimal(str(label).partition("-")[0], max_digits=9)
        if not low or bucket_label(bucket(low)) != label:
            raise _refuse(path, f"bucket {quote_value(label)} is not a batch bucket "
                                "(\"1-1\", \"2-3\", \"4-7\", ...)")
        where = f"buckets[{label!r}]"
        buckets[bucket(low)] = _bucket_cost(cell, path, where, bucket(low), None)
    return buckets, fixed


def _summary(costs: dict[str, Any], path: str) -> dict[int, BucketCost]:
    """The snapshot's form, `StepCostTable.summary()`: "rows>=N" keys; buckets not timed yet
    (no_draft_s null) are skipped; a summary without `rows` (older engines) takes N."""
    buckets: dict[int, BucketCost] = {}
    for key, cell in costs.items():
        prefix, _, number = str(key).partition(">=")
        low = ascii_decimal(number, max_digits=9) if prefix == "rows" else None
        if not low or bucket_bounds(bucket(low))[0] != low:
            raise _refuse(path, f"step cost key {quote_value(key)} is not \"rows>=N\" of a "
                                "bucket (1, 2, 4, 8, ...)")
        if isinstance(cell, dict) and cell.get("no_draft_s") is None:
            continue  # a bucket whose baseline was never measured
        buckets[bucket(low)] = _bucket_cost(cell, path, f"step_costs[{key!r}]", bucket(low),
                                            low)
    return buckets


def fill_from_prior(measured: StepCostCurve, prior: StepCostCurve) -> StepCostCurve:
    """`measured`'s buckets as they are; every other bucket of `prior`, scaled by measured over
    prior no-draft seconds at the nearest measured bucket (at that bucket's measured rows),
    all its parts alike: a host twice as slow is slower at everything. The result's
    `measured` keeps only the measured buckets; its source names both."""
    kept = {key: cost for key, cost in measured.buckets.items() if key in measured.measured}
    if not kept:
        return prior
    buckets = dict(kept)
    scales: dict[int, float] = {}
    for key, cost in prior.buckets.items():
        if key in buckets:
            continue
        near = _nearest(kept, key)
        if near not in scales:
            at = kept[near]
            prior_s = prior.seconds(max(1, round(at.rows)), 0.0, 0.0)
            scales[near] = at.no_draft_s / prior_s if prior_s > 0 else 1.0
        scale = scales[near]
        buckets[key] = BucketCost(cost.no_draft_s * scale, cost.switch_s * scale,
                                  cost.per_token_s * scale, cost.rows)
    if not scales:
        return StepCostCurve(buckets, measured.source, frozenset(kept), measured.fixed_tokens)
    said = ", ".join(f"x{scales[k]:.2f} at {bucket_label(k)}" for k in sorted(scales))
    source = (f"{measured.source} for {', '.join(bucket_label(k) for k in sorted(kept))}; "
              f"{prior.source} for the other buckets, scaled to the measured ({said})")
    return StepCostCurve(dict(sorted(buckets.items())), source, frozenset(kept),
                         measured.fixed_tokens)


def _nearest(keys: dict[int, BucketCost], key: int) -> int:
    """The bucket of `keys` nearest `key` (ties: the larger, as `StepCostCurve.at` picks)."""
    return min(keys, key=lambda m: (abs(m - key), -m))

"""`whatif --costs` (`whatif/costs.py`): every form a running engine's step costs come in, every
bad input as one line, and a measured curve completed from a prior."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from vllm_specdec_plugin.cli.status_figures import status_of
from vllm_specdec_plugin.core.schedule_control import ScheduleController
from vllm_specdec_plugin.core.step_cost import BucketCost, StepCostCurve, StepCostTable
from vllm_specdec_plugin.engine import schedule_report
from vllm_specdec_plugin.inputs.vllm_metrics import parse_metrics, read_counters
from vllm_specdec_plugin.whatif.costs import CostsError, fill_from_prior, load_costs


def controller(scale: float = 1.0) -> ScheduleController:
    """A controller whose step-cost table timed batches 1 and 5 (buckets 1 and 3) and saw
    drafting steps there; batch 2 (bucket 2) only drafting steps, so no baseline."""
    found = ScheduleController([5] * 9 + [0] * 56, (0, 5))
    table: StepCostTable = found.costs
    for i in range(40):
        for rows, base in ((1, 0.010), (5, 0.014)):
            table.observe(rows, 0, scale * base * (1 + 0.01 * (i % 3)))
            table.observe(rows, 3 * rows, scale * (base + 0.0008 * 3 * rows))
        table.observe(2, 4, 0.02)
    return found


def metrics_text(snapshot: dict) -> str:
    """The snapshot's gauges in the Prometheus text format (as /metrics serves them)."""
    lines = []
    for name, labels, value in schedule_report.gauge_samples(snapshot):
        body = ",".join(f'{key}="{labels[key]}"' for key in sorted(labels))
        lines.append(f"{name}{{{body}}} {value!r}")
    return "\n".join(lines) + "\n"


def status_json(scale: float = 1.0, indent: int | None = 2) -> str:
    """`vllm-specdec status --json` against an engine whose controller is `controller(scale)`."""
    snapshot = schedule_report.snapshot(controller(scale), None, 0.0, 10, "m")
    return status_of(read_counters(parse_metrics(metrics_text(snapshot)))).to_json(indent)


def expected(scale: float = 1.0) -> dict[int, BucketCost]:
    table_curve = controller(scale).costs.curve("table")
    assert table_curve is not None and set(table_curve.buckets) == {1, 3}
    return table_curve.buckets


def write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "costs.json"
    path.write_text(text)
    return str(path)


def test_status_json_output(tmp_path):
    path = write(tmp_path, status_json())
    costs = load_costs(path)
    assert costs.buckets == expected()
    assert (costs.source, costs.measured, costs.fixed_tokens) == (
        f"measured: {path}", frozenset({1, 3}), 16.0)


def test_watch_stream_last_line(tmp_path):
    stream = "\n".join([status_json(1.0, None), status_json(2.0, None)]) + "\n"
    costs = load_costs(write(tmp_path, stream))
    assert costs.buckets == expected(2.0) != expected(1.0)


def test_controller_snapshot_file(tmp_path):
    snapshot = schedule_report.snapshot(controller(), None, 0.0, 10, "m")
    assert snapshot["step_costs"]["rows>=2"]["no_draft_s"] is None  # not timed: left out
    costs = load_costs(write(tmp_path, json.dumps(snapshot)))
    assert costs.buckets == expected() and costs.measured == frozenset({1, 3})


def test_bare_step_costs_objects(tmp_path):
    exported = json.loads(status_json())["step_costs"]
    assert load_costs(write(tmp_path, json.dumps(exported))).buckets == expected()
    summary = controller().costs.summary()
    assert load_costs(write(tmp_path, json.dumps(summary))).buckets == expected()
    for cell in summary.values():
        del cell["rows"]  # an older engine's summary: the bucket's first batch size
    rows = {key: cost.rows for key, cost in load_costs(write(tmp_path, json.dumps(summary)))
            .buckets.items()}
    assert rows == {1: 1.0, 3: 4.0}
    exported["fixed_tokens"] = 40.0
    assert load_costs(write(tmp_path, json.dumps(exported))).fixed_tokens == 40.0


def bucket(**fields: object) -> dict:
    cell = {"rows": 1.0, "no_draft_s": 0.01, "switch_s": 0.0, "per_token_s": 0.001}
    cell.update(fields)
    return cell


def export(buckets: dict, **fields: object) -> str:
    return json.dumps({"format": "vllm-specdec-step-costs/v1", "fixed_tokens": 16.0,
                       "buckets": buckets, **fields})


@pytest.mark.parametrize(("text", "says"), [
    ("", "is empty"),
    ("{not json", "is not valid JSON"),
    ('{"step_costs": {"format": "vllm-specdec-step-costs/v1", "buckets": {"1-1": '
     '{"rows": 1, "no_draft_s": NaN, "switch_s": 0, "per_token_s": 0}}}}', "refused"),
    ("[1, 2]", "holds a JSON list, not an object"),
    ('{"decision": null, "verdict": "no speculative decoding"}', "status` output without"),
    ('{"step_costs": null}', "has no step costs"),
    ('{"step_costs": [1]}', "its step_costs is a list"),
    ('{"hello": 1}', "holds no step costs"),
    (export({}, format="vllm-specdec-step-costs/v9"), "format 'vllm-specdec-step-costs/v9'"),
    (export([]), "step_costs.buckets must be an object"),
    (export({}), "holds no measured bucket yet"),
    (export({"1-2": bucket()}), "bucket '1-2' is not a batch bucket"),
    (export({"1-1": 3}), "buckets['1-1'] must be an object"),
    (export({"1-1": bucket(per_token_s=-0.001)}),
     "buckets['1-1'].per_token_s -0.001 is outside the physical range (0 to 600 seconds)"),
    (export({"1-1": bucket(switch_s="0.1")}), "buckets['1-1'].switch_s must be a number, got "
                                              "'0.1'"),
    (export({"1-1": bucket(no_draft_s=True)}), "no_draft_s must be a number, got True"),
    (export({"1-1": bucket(no_draft_s=0)}),
     "buckets['1-1'].no_draft_s 0 is outside the physical range (1e-06 to 600 seconds)"),
    (export({"1-1": bucket(no_draft_s=-0.01)}), "no_draft_s -0.01 is outside"),
    (export({"1-1": bucket(no_draft_s=1e300)}),
     "buckets['1-1'].no_draft_s 1e+300 is outside the physical range (1e-06 to 600 seconds)"),
    (export({"1-1": bucket(no_draft_s=601)}), "no_draft_s 601 is outside"),
    (export({"1-1": bucket(switch_s=1e300)}), "switch_s 1e+300 is outside"),
    (export({"1-1": bucket(per_token_s=1e300)}), "per_token_s 1e+300 is outside"),
    (export({"1-1": bucket(rows=0.5)}),
     "buckets['1-1'].rows 0.5 is outside the physical range (1 to 1 rows, the batch sizes of "
     "bucket 1-1)"),
    (export({"4-7": bucket(rows=1e308)}),
     "buckets['4-7'].rows 1e+308 is outside the physical range (4 to 7 rows, the batch sizes "
     "of bucket 4-7)"),
    (export({"4-7": bucket(rows=8)}), "buckets['4-7'].rows 8 is outside"),
    (export({"4-7": bucket(rows=3.5)}), "buckets['4-7'].rows 3.5 is outside"),
    (export({"1-1": bucket(rows=None)}), "buckets['1-1'].rows must be a number, got None"),
    (export({"1-1": bucket()}, fixed_tokens=-1),
     "fixed_tokens -1 is outside the physical range (0 to 1e+06 tokens)"),
    (export({"1-1": bucket()}, fixed_tokens=1e308), "fixed_tokens 1e+308 is outside"),
    ('{"rows>=4": {"no_draft_s": 0.01, "switch_s": 0, "per_token_s": 0, "rows": 1e308}}',
     "step_costs['rows>=4'].rows 1e+308 is outside the physical range (4 to 7 rows"),
    ('{"rows>=1": {"no_draft_s": 1e300, "switch_s": 0, "per_token_s": 0}}',
     "step_costs['rows>=1'].no_draft_s 1e+300 is outside"),
    ('{"rows>=3": {"no_draft_s": 0.01}}', "key 'rows>=3' is not \"rows>=N\" of a bucket"),
    ('{"rows>=1": {"no_draft_s": null}}', "holds no measured bucket yet"),
    ("[" * 100 + "]" * 100, "nests"),
    ('{"a": 1}\n{"b": 2\n', "(its last line) is not valid JSON"),
])
def test_each_bad_input_is_one_line_naming_the_file_and_the_fix(tmp_path, text, says):
    path = write(tmp_path, text)
    with pytest.raises(CostsError) as caught:
        load_costs(path)
    message = str(caught.value)
    assert says in message and path in message and "\n" not in message
    assert "vllm-specdec status --url URL --json > costs.json" in message


def test_unreadable_files(tmp_path):
    big = tmp_path / "big.json"
    big.write_text(" " * (1 << 20) + "{}")
    bad_utf8 = tmp_path / "latin1.json"
    bad_utf8.write_bytes(b'{"step_costs": "\xe9"}')
    for path, says in ((tmp_path / "absent.json", "cannot be read (No such file"),
                       (tmp_path, "is a directory, not a regular file"),
                       (big, "cannot be read (larger than 1048576 bytes); keep a `status "
                             "--watch` stream's last line (`tail -n 1 FILE > costs.json`)"),
                       (bad_utf8, "is not UTF-8 text (byte 0xe9")):
        with pytest.raises(CostsError, match=r"--costs .*") as caught:
            load_costs(str(path))
        assert says in str(caught.value) and "vllm-specdec status" in str(caught.value)


def test_fifos_and_devices_are_refused_without_waiting(tmp_path):
    """A FIFO without a writer would block the open forever; a device is not a file. Each
    is refused from its type, before any read (run bounded: a regression fails, not hangs)."""
    from support.bounded import run_bounded

    fifo = tmp_path / "costs.fifo"
    os.mkfifo(fifo)
    done = run_bounded(f"""
        from vllm_specdec_plugin.whatif.costs import CostsError, load_costs
        for path in ({str(fifo)!r}, "/dev/zero", "/dev/null"):
            try:
                load_costs(path)
            except CostsError as exc:
                print(exc.message)
        """, timeout_s=20)
    assert done.returncode == 0, done
    fix = "save the costs to a file (`vllm-specdec status --url URL --json > costs.json`)"
    assert done.stdout.splitlines() == [
        f"--costs '{fifo}': is a FIFO (named pipe), not a regular file; {fix} and give its path",
        f"--costs '/dev/zero': is a character device, not a regular file; {fix} and give its "
        "path",
        f"--costs '/dev/null': is a character device, not a regular file; {fix} and give its "
        "path"]


def prior_curve(no_draft: float = 0.01) -> StepCostCurve:
    """Buckets 1..6, each modelled at its first batch size."""
    return StepCostCurve({key: BucketCost(no_draft, 0.001, 0.0001, float(1 << (key - 1)))
                          for key in range(1, 7)}, "prior: roofline X")


def test_fill_from_prior_scales_the_prior_to_the_nearest_measured_bucket():
    measured = StepCostCurve({1: BucketCost(0.02, 0.0, 0.002, 1.0),
                              4: BucketCost(0.005, 0.0005, 0.0001, 8.0)},
                             "measured: costs.json", frozenset({1, 4}))
    filled = fill_from_prior(measured, prior_curve())
    assert filled.buckets[1] == measured.buckets[1] and filled.buckets[4] == measured.buckets[4]
    assert filled.measured == frozenset({1, 4}) and sorted(filled.buckets) == [1, 2, 3, 4, 5, 6]
    # bucket 2 is nearest bucket 1 (x2), buckets 3, 5 and 6 nearest bucket 4 (x0.5)
    assert filled.buckets[2] == BucketCost(0.02, 0.002, 0.0002, 2.0)
    for key in (3, 5, 6):
        assert filled.buckets[key] == BucketCost(0.005, 0.0005, 0.00005, float(1 << (key - 1)))
    assert filled.source.startswith("measured: costs.json for 1-1, 8-15; prior: roofline X")
    assert "x2.00 at 1-1" in filled.source and "x0.50 at 8-15" in filled.source


def test_fill_from_prior_takes_the_larger_of_two_nearest_buckets():
    # bucket 2 lies between measured buckets 1 (x2) and 3 (x3): the larger one, as
    # `StepCostCurve.at` picks
    measured = StepCostCurve({1: BucketCost(0.02, 0.0, 0.0, 1.0),
                              3: BucketCost(0.03, 0.0, 0.0, 4.0)}, "measured: m",
                             frozenset({1, 3}))
    assert fill_from_prior(measured, prior_curve()).buckets[2].no_draft_s == pytest.approx(0.03)


def test_fill_from_prior_compares_at_the_measured_rows():
    # measured at 5 rows in bucket 3 (4-7), the prior models bucket 3 at 4 rows
    measured = StepCostCurve({3: BucketCost(0.021, 0.0, 0.0, 5.0)}, "measured: m",
                             frozenset({3}))
    filled = fill_from_prior(measured, prior_curve())
    prior_at_5 = 0.01 * (16 + 5) / (16 + 4)
    assert filled.buckets[1].no_draft_s == pytest.approx(0.01 * 0.021 / prior_at_5)


def test_fill_from_prior_keeps_only_measured_keys():
    half = StepCostCurve({1: BucketCost(0.02, 0.0, 0.0, 1.0), 2: BucketCost(9.0, 9.0, 9.0, 2.0)},
                         "measured: m", frozenset({1}))
    filled = fill_from_prior(half, prior_curve())
    assert filled.measured == frozenset({1}) and filled.buckets[2].no_draft_s == 0.02
    assert fill_from_prior(StepCostCurve({}, "measured: none"), prior_curve()) == prior_curve()
    only = fill_from_prior(half, StepCostCurve({1: BucketCost(1, 1, 1, 1)}, "prior: p"))
    assert only.source == "measured: m" and set(only.buckets) == {1}

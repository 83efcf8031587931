"""The schedule controller's gauges: from the engine core's snapshot (engine/schedule_report.py)
through a Prometheus registry and its text format, read back by the one reader
(inputs/vllm_metrics.py) into `vllm-specdec status`'s lines."""

from __future__ import annotations

import json
import re

from vllm_specdec_plugin.cli.status_figures import status_of
from vllm_specdec_plugin.cli.status_render import render_text, schedule_lines
from vllm_specdec_plugin.core.schedule_control import ScheduleController, Step
from vllm_specdec_plugin.core.step_cost import bucket
from vllm_specdec_plugin.engine import schedule_report
from vllm_specdec_plugin.inputs.vllm_metrics import parse_metrics, read_counters

PRIOR = [5] * 5 + [2] * 4 + [0] * 56


def learned() -> ScheduleController:
    """Batch 1: k=5 returns 1.6x tokens per second; batch 16: every k>0 costs."""
    controller = ScheduleController(PRIOR, (0, 2, 5))
    lookup = list(PRIOR)
    for batch, rate in ((1, {0: 10.0, 2: 13.0, 5: 16.0}), (16, {0: 10.0, 2: 9.5, 5: 9.0})):
        for step in range(1500):
            k = lookup[batch]
            seconds = 0.01 * (1 + 0.02 * (step % 3))
            change = controller.observe(Step(batch, k, seconds, round(batch * rate[k] * seconds
                                                                      * 100) // 1, batch * k))
            if change:
                key, new = change
                for b in range(1 << (key - 1), min(1 << key, len(lookup))):
                    lookup[b] = new
    return controller


def exposition(tmp_path) -> str:
    from prometheus_client import CollectorRegistry, generate_latest

    path = tmp_path / "schedule.json"
    path.write_text(json.dumps(schedule_report.snapshot(learned(), None, 0.0012, 100, "m")))
    registry = CollectorRegistry()
    registry.register(schedule_report.ScheduleCollector(str(path)))
    return generate_latest(registry).decode()


def test_gauges_reach_status_lines(tmp_path):
    text = exposition(tmp_path)
    assert 'vllm_specdec_schedule_k{batch_bucket="1-1",model_name="m"} 5.0' in text
    assert 'vllm_specdec_schedule_k{batch_bucket="16-31",model_name="m"} 0.0' in text
    assert 'vllm_specdec_schedule_gain_pairs{batch_bucket="1-1",k="0",model_name="m"}' in text
    assert 'vllm_specdec_schedule_overhead_us_per_step{model_name="m"} 12.0' in text
    status = status_of(read_counters(parse_metrics(text)))
    cells = {cell["batch_bucket"]: cell for cell in status.schedule}
    assert cells["1-1"]["k"] == 5 and cells["16-31"]["k"] == 0
    lines = schedule_lines(status.schedule)
    assert lines[0].startswith("batch 1-1: k=5, +6") and "against k=0" in lines[0]
    assert lines[1].startswith("batch 16-31: k=0; k=2 would cost") and "k=5 would cost" in lines[1]
    assert "schedule:" in render_text(status)
    assert json.loads(status.to_json())["schedule"] == status.schedule


def test_no_snapshot_no_gauges_no_schedule_key(tmp_path):
    from prometheus_client import CollectorRegistry, generate_latest

    registry = CollectorRegistry()
    registry.register(schedule_report.ScheduleCollector(str(tmp_path / "absent.json")))
    assert "vllm_specdec_schedule" not in generate_latest(registry).decode()
    status = status_of(read_counters(parse_metrics("vllm:generation_tokens_total 3\n")))
    assert status.schedule is None and "schedule" not in json.loads(status.to_json())


def test_a_hostile_snapshot_yields_no_gauge(tmp_path):
    path = tmp_path / "schedule.json"
    for body in ("[]", '{"buckets": {"1-1": {"k": "five", "gain": {"2": {"ratio": "x"}}}}}',
                 "{" * 5000, "\xff\xfe", '{"buckets": 3, "overhead_us_per_step": "1"}'):
        path.write_text(body, errors="surrogateescape")
        assert list(schedule_report.ScheduleCollector(str(path)).collect()) == []


def test_reader_bounds_schedule_samples():
    text = "".join(f'vllm_specdec_schedule_k{{batch_bucket="{i}-{i}"}} 1\n' for i in range(9000))
    counters = read_counters(parse_metrics(text))
    assert len(counters.schedule) <= 4096
    assert bucket(1) == 1


# --- the learned step costs: snapshot -> gauges -> /metrics -> status --json and its line -------

def test_step_cost_gauges_from_a_snapshot():
    data = schedule_report.snapshot(learned(), None, 0.0012, 100, "m")
    costs = data["step_costs"]
    samples = [(name, labels, value) for name, labels, value
               in schedule_report.gauge_samples(data) if "step_cost" in name]
    for key, label in (("rows>=1", "1-1"), ("rows>=16", "16-31")):
        cell = costs[key]
        bucket_labels = {"model_name": "m", "batch_bucket": label}
        assert ("vllm_specdec_step_cost_rows", bucket_labels, cell["rows"]) in samples
        for part in ("no_draft", "switch", "per_token"):
            assert ("vllm_specdec_step_cost_seconds", {**bucket_labels, "part": part},
                    cell[f"{part}_s"]) in samples
    assert len(samples) == 8
    # a bucket not timed yet, or a hostile cell, yields no step-cost gauge
    data["step_costs"] = {"rows>=4": {"no_draft_s": None, "rows": None, "switch_s": None,
                                      "per_token_s": None},
                          "rows>=x": {"no_draft_s": 1.0}, "rows>=8": [1],
                          "rows>=2": {"no_draft_s": True, "rows": 2, "switch_s": 0,
                                      "per_token_s": 0}}
    assert not [s for s in schedule_report.gauge_samples(data) if "step_cost" in s[0]]


def test_step_costs_round_trip_through_metrics_text(tmp_path):
    from vllm_specdec_plugin.core.step_cost import BucketCost

    text = exposition(tmp_path)
    assert ('vllm_specdec_step_cost_seconds{batch_bucket="1-1",model_name="m",part="no_draft"} '
            "0.0102") in text
    assert 'vllm_specdec_step_cost_rows{batch_bucket="16-31",model_name="m"} 16.0' in text
    summary = learned().costs.summary()
    expected = tuple((label, BucketCost(summary[key]["no_draft_s"], summary[key]["switch_s"],
                                        summary[key]["per_token_s"], summary[key]["rows"]))
                     for key, label in (("rows>=1", "1-1"), ("rows>=16", "16-31")))
    assert read_counters(parse_metrics(text)).step_costs == expected


def test_status_json_and_text_carry_the_step_costs(tmp_path):
    status = status_of(read_counters(parse_metrics(exposition(tmp_path))))
    summary = learned().costs.summary()
    exported = json.loads(status.to_json())["step_costs"]
    assert exported == {
        "format": "vllm-specdec-step-costs/v1", "fixed_tokens": 16.0,
        "buckets": {label: {"rows": summary[key]["rows"],
                            "no_draft_s": summary[key]["no_draft_s"],
                            "switch_s": summary[key]["switch_s"],
                            "per_token_s": summary[key]["per_token_s"]}
                    for key, label in (("rows>=1", "1-1"), ("rows>=16", "16-31"))}}
    assert list(exported["buckets"]) == ["1-1", "16-31"]  # smallest bucket first
    line = next(row for row in render_text(status).splitlines() if row.startswith("step costs"))
    # each bucket's no-draft step and its price per drafted token in ms, 3 figures (a step
    # costs the same whatever it drafts in `learned`: the price fitted from its steps is 0)
    assert summary["rows>=1"]["per_token_s"] == summary["rows>=16"]["per_token_s"] == 0.0
    assert line.endswith(" · ".join(
        f"{label} {summary[key]['no_draft_s'] * 1e3:.3g} ms "
        f"(+{summary[key]['per_token_s'] * 1e3:.3g} ms/drafted token)"
        for key, label in (("rows>=1", "1-1"), ("rows>=16", "16-31"))))
    assert re.search(r"1-1 \d+\.\d ms \(\+\d+ ms/drafted token\) · 16-31 ", line), line
    # no controller: no key, no line
    bare = status_of(read_counters(parse_metrics("vllm:generation_tokens_total 3\n")))
    assert "step_costs" not in json.loads(bare.to_json())
    assert "step costs" not in render_text(bare)

"""The monitoring files load and hold what they promise (pure; the check that every metric they
name exists in a real `vllm serve`'s /metrics is in tests/engine/test_observability.py)."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from vllm_specdec_plugin.cli.status_figures import LOW_ACCEPTANCE

MONITORING = Path(__file__).resolve().parents[2] / "launch" / "monitoring"


def test_monitoring_files_load() -> None:
    """The dashboard is Grafana JSON with the promised panels; the rules are valid."""
    dashboard = json.loads((MONITORING / "grafana-dashboard.json").read_text())
    titles = " | ".join(panel["title"] for panel in dashboard["panels"])
    for wanted in ("Decision", "Acceptance rate", "Mean acceptance length", "Per-position",
                   "Output tokens/s"):
        assert wanted in titles
    rule = yaml.safe_load((MONITORING / "prometheusrule.yaml").read_text())
    assert rule["kind"] == "PrometheusRule"
    alerts = {r["alert"]: r for group in rule["spec"]["groups"] for r in group["rules"]}
    assert set(alerts) == {"SpeculativeDecodingLowAcceptance", "SpeculativeDecodingOptedInButOff"}
    assert f") < {LOW_ACCEPTANCE}\n" in alerts["SpeculativeDecodingLowAcceptance"]["expr"]
    assert all(r["for"] and r["labels"]["severity"] for r in alerts.values())


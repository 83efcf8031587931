"""Alerts and dashboard as an operator installs them: promtool checks and unit-tests the
PrometheusRule (never skipped in CI), every dashboard query parses and is scoped by the
namespace and pod variables (same-named models in two namespaces stay apart, evaluated by
promtool), the metric names exist in the installed vLLM, and both alerts carry a runbook_url
that resolves to a heading of docs/deploy.md."""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from deploy_support import DEPLOY_DOC, MONITORING, REPO, heading_anchors, missing, tool_path

METRIC = re.compile(r"\b(vllm:[a-zA-Z0-9_:]+|vllm_specdec_[a-zA-Z0-9_]+)(\{[^}]*\})?")
SCOPE = ('namespace=~"$namespace"', 'pod=~"$pod"', 'model_name=~"$model_name"')


def rule() -> dict:
    return yaml.safe_load((MONITORING / "prometheusrule.yaml").read_text())


def alerts() -> dict[str, dict]:
    return {r["alert"]: r for g in rule()["spec"]["groups"] for r in g["rules"] if "alert" in r}


def dashboard() -> dict:
    return json.loads((MONITORING / "grafana-dashboard.json").read_text())


def targets() -> list[tuple[str, str]]:
    return [(p["title"], t["expr"]) for p in dashboard()["panels"] for t in p["targets"]]


def promtool() -> str:
    return tool_path("promtool", "bash .ci/setup-tools.sh: Debian's prometheus package")


def run_promtool(tmp: Path, *args: str) -> None:
    done = subprocess.run([promtool(), *args], cwd=tmp, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr


def test_rules_check(tmp_path: Path):
    """CI: `promtool check rules rules.yml` (the PrometheusRule's spec.groups)."""
    (tmp_path / "rules.yml").write_text(yaml.safe_dump({"groups": rule()["spec"]["groups"]}))
    run_promtool(tmp_path, "check", "rules", "rules.yml")


def test_rule_unit_tests(tmp_path: Path):
    """CI: `promtool test rules prometheusrule_test.yaml` beside the extracted rules.yml."""
    (tmp_path / "rules.yml").write_text(yaml.safe_dump({"groups": rule()["spec"]["groups"]}))
    shutil.copy(MONITORING / "prometheusrule_test.yaml", tmp_path)
    run_promtool(tmp_path, "test", "rules", "prometheusrule_test.yaml")


def test_prometheusrule_carries_the_selector_label_and_docs_say_so():
    labels = rule()["metadata"]["labels"]
    assert labels.get("release") == "kube-prometheus-stack"
    doc = DEPLOY_DOC.read_text()
    assert "release: kube-prometheus-stack" in doc and "ruleSelector" in doc


def test_runbook_urls_resolve_to_deploy_doc_headings():
    anchors = heading_anchors(DEPLOY_DOC.read_text())
    for name, alert in alerts().items():
        url = alert["annotations"].get("runbook_url", "")
        path, _, anchor = url.partition("#")
        assert path == "docs/deploy.md" and anchor == f"alert-{name.lower()}", (name, url)
        assert anchor in anchors, f"{name}: no heading for #{anchor} in docs/deploy.md"


def test_every_dashboard_query_is_scoped_by_namespace_pod_and_model():
    names = {v["name"] for v in dashboard()["templating"]["list"]}
    assert {"datasource", "namespace", "pod", "model_name"} <= names
    for title, expr in targets():
        for match in METRIC.finditer(expr):
            selector = match.group(2) or ""
            assert all(s in selector for s in SCOPE), f"{title}: {match.group(0)}"


def test_latency_batch_and_decision_panels():
    exprs = {title: " ".join(e for t, e in targets() if t == title) for title, _ in targets()}
    latency = [t for t in exprs if "latency" in t.lower()]
    assert latency and "vllm:inter_token_latency_seconds_bucket" in exprs[latency[0]]
    batch = [t for t in exprs if "batch" in t.lower()]
    assert batch and "vllm:num_requests_running" in exprs[batch[0]]
    (decision,) = [t for t in exprs if t.startswith("Decision")]
    assert re.search(r"max by \([^)]*\bmodel_name\b", exprs[decision])


def substituted(expr: str) -> str:
    return (expr.replace("$__rate_interval", "5m").replace("$namespace", ".*")
            .replace("$pod", ".*").replace("$model_name", ".*"))


def test_dashboard_queries_parse_and_keep_namespaces_apart(tmp_path: Path):
    """Every panel query through promtool's parser, then the acceptance-rate and batch-size
    queries evaluated on the same model served in two namespaces: two series, not a sum."""
    records = [{"record": f"dashboard:query_{i}", "expr": substituted(expr)}
               for i, (_, expr) in enumerate(targets())]
    (tmp_path / "dashboard.yml").write_text(yaml.safe_dump(
        {"groups": [{"name": "dashboard", "rules": records}]}))
    run_promtool(tmp_path, "check", "rules", "dashboard.yml")

    by_title = {title: expr for title, expr in reversed(targets())}
    acceptance = substituted(next(e for t, e in by_title.items() if t.startswith("Acceptance")))
    batch = substituted(next(e for t, e in by_title.items() if "Batch" in t))
    latency = substituted(next(e for t, e in by_title.items() if "latency" in t))
    series = []
    for ns, accepted in (("team-a", 2), ("team-b", 6)):
        labels = f'namespace="{ns}",pod="llm-0",model_name="m"'
        series += [
            {"series": f"vllm:spec_decode_num_draft_tokens_total{{{labels}}}", "values": "0+8x20"},
            {"series": f"vllm:spec_decode_num_accepted_tokens_total{{{labels}}}",
             "values": f"0+{accepted}x20"},
            {"series": f"vllm:num_requests_running{{{labels}}}", "values": "4x20"},
        ]
        for le, count in (("0.01", 0), ("0.05", 5), ("0.1", 10), ("+Inf", 10)):
            bucket = f'vllm:inter_token_latency_seconds_bucket{{{labels},le="{le}"}}'
            series.append({"series": bucket, "values": f"0+{count}x20"})
    exp = {"team-a": 0.25, "team-b": 0.75}  # exact in binary floating point
    test = {"rule_files": [], "evaluation_interval": "1m", "tests": [{
        "interval": "1m", "input_series": series,
        "promql_expr_test": [
            {"expr": acceptance, "eval_time": "10m",
             "exp_samples": [{"labels": f'{{model_name="m",namespace="{ns}"}}', "value": v}
                             for ns, v in exp.items()]},
            {"expr": batch, "eval_time": "10m",
             "exp_samples": [{"labels": f'{{model_name="m",namespace="{ns}"}}', "value": 4}
                             for ns in exp]},
        ]}]}
    # p50 of the latency panel: within the 0.01-0.05 s bucket, interpolated (0.05 s).
    test["tests"][0]["promql_expr_test"].append(
        {"expr": latency, "eval_time": "10m",
         "exp_samples": [{"labels": f'{{model_name="m",namespace="{ns}"}}', "value": 0.05}
                         for ns in exp]})
    (tmp_path / "dashboard_test.yml").write_text(yaml.safe_dump(test))
    run_promtool(tmp_path, "test", "rules", "dashboard_test.yml")


def test_metric_names_exist_in_the_installed_vllm():
    """A cheap check without an engine (tests/engine/test_observability.py checks a real server's
    /metrics): each vllm:* name the dashboard and rules use is defined in vLLM's source, and the
    plugin's gauge in the plugin's."""
    spec = importlib.util.find_spec("vllm")
    if spec is None or spec.origin is None:
        missing("vllm", "bash scripts/setup-env.sh")
    v1 = Path(spec.origin).parent / "v1"
    vllm_source = "\n".join(p.read_text() for p in v1.rglob("*.py")
                            if "metrics" in p.name or p.parent.name == "metrics")
    plugin_source = "\n".join(p.read_text() for p in (REPO / "vllm_specdec_plugin").rglob("*.py"))
    queries = [e for _, e in targets()] + [r["expr"] for r in alerts().values()]
    names = {m.group(1) for q in queries for m in METRIC.finditer(q)}
    for name in sorted(names):
        base = re.sub(r"_(total|bucket|sum|count)$", "", name)
        source = plugin_source if name.startswith("vllm_specdec_") else vllm_source
        assert f'"{base}"' in source, f"{name}: not defined by the installed vLLM / plugin"


@pytest.mark.parametrize("name", ["SpeculativeDecodingLowAcceptance",
                                  "SpeculativeDecodingOptedInButOff"])
def test_both_alerts_exist(name: str):
    assert name in alerts()

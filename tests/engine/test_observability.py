"""The decision in /metrics, `vllm-specdec status` and the monitoring files, on real `vllm serve`.

Two servers, one after the other, each shared by the assertions about it: one opted in (two API
servers, so vLLM's Prometheus registry runs in multiprocess mode), one not opted in.
"""

from __future__ import annotations

import contextlib
import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from conftest import clean_env, free_port, http, kill_group, wait_healthy

from vllm_specdec_plugin.inputs.vllm_metrics import parse_metrics

pytestmark = pytest.mark.engine
MONITORING = Path(__file__).resolve().parents[2] / "launch" / "monitoring"
SERVE_FLAGS = ["--enforce-eager", "--max-model-len", "1024", "--kv-cache-memory-bytes",
               str(1 << 30), "--disable-uvicorn-access-log"]
GAUGE = "vllm_specdec_decision_info"
# A metric name inside PromQL: vLLM's own (`vllm:` prefix) or the plugin's.
METRIC_IN_QUERY = re.compile(r"\b(vllm:[a-zA-Z0-9_:]+|vllm_specdec_[a-zA-Z0-9_]+)")


class Server:
    """A `vllm serve` of the tiny model in its own session, log in a file."""

    def __init__(self, model: Path, tmp: Path, env: dict[str, str], flags: list[str]) -> None:
        self.port, self.log = free_port(), tmp / "serve.log"
        self.model = str(model)
        with self.log.open("w") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "vllm_specdec_plugin.vllm_entry", "serve", self.model,
                 "--port", str(self.port), *SERVE_FLAGS, *flags],
                stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        self.url = f"http://127.0.0.1:{self.port}"
        self.answers: list[dict] = []

    def complete(self, prompt: str, max_tokens: int = 48, **fields: object) -> dict:
        status, body = self.post("completions", {"prompt": prompt, "max_tokens": max_tokens,
                                                 "temperature": 0, **fields})
        assert status == 200, body
        return json.loads(body)

    def post(self, endpoint: str, body: dict) -> tuple[int, str]:
        return http("POST", f"{self.url}/v1/{endpoint}", {"model": self.model, **body})

    def metrics(self) -> str:
        status, text = http("GET", f"{self.url}/metrics")
        assert status == 200
        return text

    def status_json(self) -> tuple[int, dict, str]:
        done = subprocess.run([sys.executable, "-m", "vllm_specdec_plugin.cli", "status",
                               "--json", "--url", self.url],
                              capture_output=True, text=True, timeout=60)
        return done.returncode, json.loads(done.stdout or "null"), done.stderr

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=60)
        finally:
            kill_group(self.proc)


@contextlib.contextmanager
def serving(model: Path, tmp: Path, env: dict[str, str], flags: list[str]) -> Iterator[Server]:
    server = Server(model, tmp, env, flags)
    try:
        wait_healthy(server.proc, server.port, server.log)
        yield server
    finally:
        server.stop()


def dashboard_queries() -> list[str]:
    dashboard = json.loads((MONITORING / "grafana-dashboard.json").read_text())
    queries = [target["expr"] for panel in dashboard["panels"] for target in panel["targets"]]
    queries += [var["query"]["query"] for var in dashboard["templating"]["list"]
                if isinstance(var.get("query"), dict)]
    return queries


def rule_queries() -> list[str]:
    rule = yaml.safe_load((MONITORING / "prometheusrule.yaml").read_text())
    return [r["expr"] for group in rule["spec"]["groups"] for r in group["rules"]]


@pytest.fixture(scope="class")
def opted_in(tiny_llama, prompts, tmp_path_factory) -> Iterator[Server]:
    env = clean_env({"KAITO_ENABLE_SPECULATIVE_DECODING": "true"}, tmp_path_factory.mktemp("x"))
    tmp = tmp_path_factory.mktemp("opted-in")
    with serving(tiny_llama, tmp, env, ["--api-server-count", "2"]) as server:
        server.answers = [server.complete(prompt) for prompt in prompts]
        yield server


@pytest.fixture(scope="class")
def opted_in_static(tiny_llama, prompts, tmp_path_factory) -> Iterator[Server]:
    """Opted in with the fixed schedule table (`VLLM_SPECDEC_SCHEDULE=static`: k=5 at batch 1
    on every step): what a request drafts then depends on the request alone, not on where the
    controller's exploration stands (a k=0 block or a bucket moved to k=0 on a loaded host
    drafts nothing whatever the request allows)."""
    env = clean_env({"KAITO_ENABLE_SPECULATIVE_DECODING": "true",
                     "VLLM_SPECDEC_SCHEDULE": "static"}, tmp_path_factory.mktemp("x"))
    with serving(tiny_llama, tmp_path_factory.mktemp("static"), env, []) as server:
        server.answers = [server.complete(prompt) for prompt in prompts]
        yield server


@pytest.fixture(scope="class")
def not_opted_in(tiny_llama, prompts, tmp_path_factory) -> Iterator[Server]:
    env = clean_env(tmp=tmp_path_factory.mktemp("x"))
    with serving(tiny_llama, tmp_path_factory.mktemp("plain"), env, []) as server:
        server.answers = [server.complete(prompts[0])]
        yield server


class TestOptedIn:
    """One opted-in server (two API servers: vLLM's registry in multiprocess mode)."""

    def test_gauge_shows_the_decision(self, opted_in: Server) -> None:
        samples = [s for s in parse_metrics(opted_in.metrics()) if s.name == GAUGE]
        assert len(samples) == 1, samples  # one sample although two API servers export it
        assert samples[0].value == 1
        assert samples[0].labels == {
            "model_name": opted_in.model, "method": "ngram", "source": "ngram-fallback",
            "num_speculative_tokens": "5",
            "preset": opted_in.model, "platform": "cpu", "schedule": "controller"}

    def test_schedule_gauges_reach_metrics_and_status(self, opted_in: Server) -> None:
        """The controller runs in the engine core; with two API servers vLLM serves
        prometheus_client's shared files, which the engine core's gauges write."""
        text = opted_in.metrics()
        ks = [s for s in parse_metrics(text) if s.name == "vllm_specdec_schedule_k"]
        assert ks and all(s.labels["batch_bucket"].count("-") == 1 for s in ks), ks
        assert "vllm_specdec_schedule_overhead_us_per_step" in text
        rc, status, err = opted_in.status_json()
        assert rc == 0 and status["schedule"], err

    def test_each_response_carries_its_acceptance(self, opted_in: Server) -> None:
        figures = [a["metrics"]["speculative_decoding"] for a in opted_in.answers]
        assert sum(f["num_draft_tokens"] for f in figures) > 0
        assert all(0 <= f["draft_acceptance_rate"] <= 1 for f in figures)
        assert "per_request_spec_decode_metrics=summary" in opted_in.log.read_text()

    def test_status_json(self, opted_in: Server) -> None:
        rc, status, err = opted_in.status_json()
        assert rc == 0, err
        assert status["decision"]["method"] == "ngram"
        assert status["drafts"] > 0 and status["draft_tokens"] >= status["drafts"]
        assert 0 < status["acceptance_rate"] < 1
        assert status["mean_acceptance_length"] == pytest.approx(
            1 + status["accepted_tokens"] / status["drafts"], abs=1e-3)
        assert len(status["per_position"]) == 5 and status["verdict"]

    def test_monitoring_metric_names_exist(self, opted_in: Server) -> None:
        exported = {sample.name for sample in parse_metrics(opted_in.metrics())}
        queries = dashboard_queries() + rule_queries()
        used = {name for query in queries for name in METRIC_IN_QUERY.findall(query)}
        assert GAUGE in used and "vllm:spec_decode_num_accepted_tokens_per_pos_total" in used
        assert used <= exported, f"not in vllm serve's /metrics: {sorted(used - exported)}"


class TestRequestSpeculation:
    """vllm_xargs.num_speculative_tokens on an opted-in server with the fixed table
    (docs/operations.md, per-request speculation): honoured per request on chat and
    completions, bad values refused with a 400 naming the field, counted by label in /metrics."""

    def test_zero_turns_speculation_off_for_that_request_only(self, opted_in_static: Server,
                                                              prompts) -> None:
        off = opted_in_static.complete(prompts[0], vllm_xargs={"num_speculative_tokens": 0})
        capped = opted_in_static.complete(prompts[0], vllm_xargs={"num_speculative_tokens": 1})
        on = opted_in_static.answers[0]
        assert off["metrics"]["speculative_decoding"]["num_draft_tokens"] == 0
        drafted = capped["metrics"]["speculative_decoding"]["num_draft_tokens"]
        assert 0 < drafted <= capped["usage"]["completion_tokens"]  # at most 1 per step
        assert on["metrics"]["speculative_decoding"]["num_draft_tokens"] > drafted
        # greedy: the same tokens whatever the request allowed
        assert off["choices"][0]["text"] == capped["choices"][0]["text"] \
            == on["choices"][0]["text"]
        status, body = opted_in_static.post("chat/completions", {
            "messages": [{"role": "user", "content": prompts[0]}], "max_tokens": 24,
            "temperature": 0, "vllm_xargs": {"num_speculative_tokens": 0}})
        assert status == 200, body
        assert json.loads(body)["metrics"]["speculative_decoding"]["num_draft_tokens"] == 0

    @pytest.mark.parametrize("value", ["five", -1, 2.5, 2.0, [1], "2"])
    @pytest.mark.parametrize("endpoint", ["completions", "chat/completions"])
    def test_a_bad_value_is_a_400_naming_the_field(self, opted_in_static: Server, endpoint: str,
                                                   value: object) -> None:
        body = {"max_tokens": 4, "vllm_xargs": {"num_speculative_tokens": value}}
        body.update({"prompt": "hi"} if endpoint == "completions"
                    else {"messages": [{"role": "user", "content": "hi"}]})
        status, text = opted_in_static.post(endpoint, body)
        assert status == 400, text
        message = json.loads(text)["error"]["message"]
        assert f"vllm_xargs.num_speculative_tokens={value!r} is refused" in message, message
        assert "expected a whole number >= 0" in message
        assert opted_in_static.proc.poll() is None  # the engine goes on serving

    def test_requests_are_counted_by_how_they_speculate(self, opted_in_static: Server,
                                                        prompts) -> None:
        opted_in_static.complete(prompts[1], max_tokens=4, vllm_xargs={"num_speculative_tokens": 0})
        opted_in_static.complete(prompts[1], max_tokens=4, vllm_xargs={"num_speculative_tokens": 2})
        counts = {s.labels["speculation"]: s.value for s in parse_metrics(opted_in_static.metrics())
                  if s.name == "vllm_specdec_requests_total"}
        assert counts.get("off", 0) >= 1 and counts.get("capped", 0) >= 1, counts
        assert counts.get("on", 0) >= len(prompts), counts

    def test_json_booleans_arrive_as_whole_numbers(self, opted_in_static: Server,
                                                   prompts) -> None:
        """vLLM's own request model turns `true`/`false` into 1/0 and refuses `null` before
        the plugin sees the value (docs/operations.md says so)."""
        one = opted_in_static.complete(prompts[0], vllm_xargs={"num_speculative_tokens": True})
        drafted = one["metrics"]["speculative_decoding"]["num_draft_tokens"]
        assert 0 < drafted <= one["usage"]["completion_tokens"]
        zero = opted_in_static.complete(prompts[0], vllm_xargs={"num_speculative_tokens": False})
        assert zero["metrics"]["speculative_decoding"]["num_draft_tokens"] == 0
        status, _ = opted_in_static.post("completions", {
            "prompt": prompts[0], "max_tokens": 4, "vllm_xargs": {"num_speculative_tokens": None}})
        assert status == 400
        assert opted_in_static.proc.poll() is None


class TestNotOptedIn:
    """One server without the opt-in, started after the opted-in one has stopped."""

    def test_nothing_exported_and_status_says_no_speculation(self, not_opted_in: Server) -> None:
        text = not_opted_in.metrics()
        assert "vllm:generation_tokens_total" in text and "vllm_specdec" not in text
        assert not_opted_in.answers[0]["metrics"] is None  # no per-request figures either
        rc, status, err = not_opted_in.status_json()
        assert rc == 0, err
        assert status["decision"] is None and status["drafts"] is None
        assert status["verdict"].startswith("no speculative decoding on this server")


"""`vllm-specdec status`: figures, verdicts, the CLI (pure logic, fast).

The real-server checks (a `vllm serve` with and without the opt-in) are in
tests/engine/test_observability.py.
"""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Iterator

import pytest

from vllm_specdec_plugin import cli
from vllm_specdec_plugin.cli import scrape
from vllm_specdec_plugin.cli import status as status_cli
from vllm_specdec_plugin.cli.status_figures import (
    iter_windows,
    status_of,
    verdict,
    window,
)
from vllm_specdec_plugin.cli.status_render import render_text
from vllm_specdec_plugin.core.types import Decision
from vllm_specdec_plugin.engine.metrics import SOURCE_SERVED_WITHOUT, decision_labels
from vllm_specdec_plugin.inputs.vllm_metrics import Counters, parse_metrics, read_counters

# The shape of vLLM 0.32's /metrics (HELP/TYPE lines, _created gauges, engine/model labels).
DECISION = ('vllm_specdec_decision_info{method="ngram",num_speculative_tokens="5",platform="cpu",'
            'preset="HuggingFaceTB/SmolLM2-135M-Instruct",schedule="on",source="ngram-fallback"} '
            "1.0\n")
SPECULATING = DECISION + """\
# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 8.0
vllm:spec_decode_num_drafts_created{engine="0",model_name="m"} 1.7960562566850858e+09
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="m"} 40.0
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="m"} 24.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="0"} 7.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="1"} 6.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="2"} 5.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="3"} 4.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="4"} 2.0
# HELP vllm:generation_tokens_total Number of generation tokens processed.
vllm:generation_tokens_total{engine="0",model_name="m"} 40.0
"""
PLAIN = """\
# HELP vllm:num_requests_running Number of requests in model execution batches.
vllm:num_requests_running{engine="0",model_name="m"} 0.0
vllm:generation_tokens_total{engine="0",model_name="m"} 120.0
"""


def counters(text: str) -> Counters:
    return read_counters(parse_metrics(text))


def test_figures_of_a_speculating_server() -> None:
    status = status_of(counters(SPECULATING))
    assert status.decision["method"] == "ngram" and status.decision["schedule"] == "on"
    assert (status.drafts, status.draft_tokens, status.accepted_tokens) == (8, 40, 24)
    assert status.acceptance_rate == 0.6
    assert status.mean_acceptance_length == 4.0  # 1 + 24 / 8
    assert status.per_position == [0.875, 0.75, 0.625, 0.5, 0.25]
    assert status.verdict == "speculation pays: 4.0 tokens per step (acceptance 0.60)"
    text = render_text(status)
    assert "ngram k=5 (source ngram-fallback" in text and "60.0%" in text
    assert "0.88 0.75 0.62 0.50 0.25" in text


def test_counters_sum_over_engines() -> None:
    text = SPECULATING + SPECULATING.replace('engine="0"', 'engine="1"').replace(DECISION, "")
    status = status_of(counters(text))
    assert (status.drafts, status.accepted_tokens) == (16, 48)
    assert status.per_position[0] == 0.875


def test_json_has_exactly_the_documented_keys() -> None:
    data = json.loads(status_of(counters(SPECULATING)).to_json())
    assert list(data) == ["decision", "drafts", "draft_tokens", "accepted_tokens",
                          "acceptance_rate", "mean_acceptance_length", "per_position", "verdict"]


def test_server_without_speculation_says_so() -> None:
    status = status_of(counters(PLAIN))
    assert status.decision is None and status.drafts is None
    assert status.verdict.startswith("no speculative decoding on this server")
    assert "not exported" in render_text(status)


def test_opted_in_but_serving_without() -> None:
    labels = decision_labels(None, None, None, False)
    assert labels["method"] == "none" and labels["source"] == SOURCE_SERVED_WITHOUT
    text = ("vllm_specdec_decision_info{" + ",".join(f'{k}="{v}"' for k, v in labels.items())
            + "} 1\n" + PLAIN)
    assert "serving WITHOUT speculative decoding" in status_of(counters(text)).verdict


def test_prefill_only_instance_is_off_by_design() -> None:
    decision = Decision(False, "prefill-only", platform="cuda")
    labels = decision_labels(decision, None, None, False)
    text = ("vllm_specdec_decision_info{" + ",".join(f'{k}="{v}"' for k, v in labels.items())
            + "} 1\n" + PLAIN)
    assert status_of(counters(text)).verdict.startswith("prefill-only instance")


def test_disable_log_stats_is_not_mistaken_for_no_speculation() -> None:
    assert "--disable-log-stats" in status_of(counters(DECISION)).verdict


@pytest.mark.parametrize(("rate", "length", "expected"), [
    (0.12, 1.6, "acceptance 0.12: consider turning it off"),
    (0.3, 2.5, "speculation pays: 2.5 tokens per step (acceptance 0.30); at high load it may not"),
    (0.8, 5.0, "speculation pays: 5.0 tokens per step (acceptance 0.80)"),
    (None, None, "speculation on, no drafts yet"),
])
def test_verdicts(rate: float | None, length: float | None, expected: str) -> None:
    assert verdict(rate, length).startswith(expected)


def test_decision_labels_from_the_decision_and_vllms_resolved_config() -> None:
    decision = Decision(True, "tuned-preset", method="mtp", preset="deepseek-ai/DeepSeek-V3",
                        platform="cuda")
    assert decision_labels(decision, "mtp", 1, True, model_name="deepseek") == {
        "model_name": "deepseek", "method": "mtp", "source": "tuned-preset",
        "num_speculative_tokens": "1",
        "preset": "deepseek-ai/DeepSeek-V3", "platform": "cuda", "schedule": "on"}
    user = Decision(True, "user-config (engine arguments)", method="eagle", platform="cpu")
    assert decision_labels(user, "eagle", 3, False)["schedule"] == "off"
    assert decision_labels(user, "eagle", 3, False)["preset"] == ""


def test_window_and_restart() -> None:
    old, new = counters(SPECULATING), counters(SPECULATING.replace(" 8.0\n", " 10.0\n")
                                                .replace(" 40.0\n", " 50.0\n"))
    delta = window(new, old)
    assert (delta.drafts, delta.draft_tokens, delta.generation_tokens) == (2, 10, 10)
    assert window(old, new) == old  # counters went down: the server restarted


def test_watch_windows_give_rates() -> None:
    first, second = counters(PLAIN), counters(PLAIN.replace("120.0", "170.0"))
    statuses = list(iter_windows(iter([(0.0, first), (5.0, second), (10.0, second)])))
    assert [s.output_tokens_per_s for s in statuses] == [10.0, 0.0]
    assert statuses[0].window_s == 5.0


class _Server:
    """A loopback HTTP server answering every GET with a fixed status and body."""

    def __init__(self, body: str, code: int = 200) -> None:
        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
                self.send_response(code)
                self.end_headers()
                self.wfile.write(body.encode())

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = http.server.HTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def serve() -> Iterator:
    servers: list[_Server] = []

    def start(body: str, code: int = 200) -> str:
        servers.append(_Server(body, code))
        return servers[-1].url

    yield start
    for server in servers:
        server.close()


def test_cli_json(serve, capsys) -> None:
    url = serve(SPECULATING)
    assert cli.main(["status", "--url", url, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["drafts"] == 8 and data["decision"]["source"] == "ngram-fallback"


def test_cli_text_and_no_speculation(serve, capsys) -> None:
    assert cli.main(["status", "--url", f"http://{serve(PLAIN)}/"]) == 0
    out = capsys.readouterr().out
    assert "verdict:" in out and "no speculative decoding on this server" in out


def test_cli_errors_name_the_url_and_the_fix(serve, capsys) -> None:
    import socket

    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        closed = sock.getsockname()[1]
    assert cli.main(["status", "--url", f"127.0.0.1:{closed}"]) == 1
    err = capsys.readouterr().err
    assert f"cannot reach http://127.0.0.1:{closed}/metrics" in err and "Traceback" not in err
    assert cli.main(["status", "--url", serve("not found", 404)]) == 1
    assert "answered HTTP 404" in capsys.readouterr().err
    assert cli.main(["status", "--url", serve("<html>hello</html>")]) == 1
    assert "serves no vLLM metrics" in capsys.readouterr().err
    assert cli.main(["status", "--url", "ftp://x"]) == 2
    assert "is not an http(s) address" in capsys.readouterr().err


def test_cli_watch_is_bounded(serve, capsys) -> None:
    url = serve(SPECULATING)
    naps: list[float] = []
    assert status_cli.main(["--url", url, "--watch", "2", "--count", "3", "--json"],
                           sleep=naps.append) == 0
    lines = capsys.readouterr().out.splitlines()
    assert naps == [2.0, 2.0, 2.0] and len(lines) == 3
    window_status = json.loads(lines[0])
    assert window_status["drafts"] == 0 and "no drafts in the last" in window_status["verdict"]
    with pytest.raises(SystemExit):
        status_cli.main(["--url", url, "--watch", "0"])


def test_metrics_url() -> None:
    assert scrape.metrics_url("localhost:8000") == "http://localhost:8000/metrics"
    assert scrape.metrics_url("https://h/v/metrics/") == "https://h/v/metrics"
    assert scrape.metrics_url("http://h:1/base/") == "http://h:1/base/metrics"


def test_watch_keeps_watching_through_failed_scrapes(serve, capsys) -> None:
    """A port-forward blip: two failed scrapes between good ones are said, backed off, and
    the watch goes on; a server that stays away ends it after WATCH_MAX_FAILURES in a row."""
    url = serve(SPECULATING)
    answers = iter(["ok", "fail", "fail", "ok", "ok"])

    def flaky(address: str) -> str:
        if next(answers) == "fail":
            raise scrape.StatusError("cannot reach the server (connection refused)")
        return scrape.fetch(address)

    naps: list[float] = []
    assert status_cli.main(["--url", url, "--watch", "2", "--count", "2", "--json"],
                           fetcher=flaky, sleep=naps.append) == 0
    out, err = capsys.readouterr()
    assert len(out.splitlines()) == 2  # two windows from three good scrapes
    assert naps == [2.0, 2.0, 4.0, 2.0]  # the retry waits double
    assert err.count("scrape failed (cannot reach the server") == 2 and "retrying in 4s" in err

    def down(address: str) -> str:
        raise scrape.StatusError("cannot reach the server (connection refused)")

    naps.clear()
    assert status_cli.main(["--url", url, "--watch", "1", "--json"], fetcher=down,
                           sleep=naps.append) == 1
    err = capsys.readouterr().err
    assert f"{scrape.WATCH_MAX_FAILURES} scrapes in a row failed" in err
    assert naps == [1.0, 2.0, 4.0, 8.0, 8.0]  # capped at WATCH_MAX_BACKOFF intervals


REQUESTS = """\
vllm_specdec_requests_total{model_name="m",speculation="on"} 30.0
vllm_specdec_requests_created{model_name="m",speculation="on"} 1.79e+09
vllm_specdec_requests_total{model_name="m",speculation="off"} 8.0
vllm_specdec_requests_total{model_name="n",speculation="off"} 2.0
vllm_specdec_requests_total{model_name="m",speculation="capped"} 0.0
vllm_specdec_requests_total{model_name="m",speculation="sideways"} 99.0
vllm_specdec_requests_total{model_name="m",speculation="on"} NaN
vllm_specdec_requests_total{model_name="m",speculation="off"} -5.0
"""


def test_requests_by_how_they_speculate_are_summed_and_shared() -> None:
    """Per-request speculation (vllm_xargs.num_speculative_tokens): the counter by label,
    summed over models; an unknown label, NaN or negative value is not counted."""
    status = status_of(counters(SPECULATING + REQUESTS))
    assert status.requests == {"on": 30, "off": 10, "capped": 0}
    assert json.loads(status.to_json())["requests"] == {"on": 30, "off": 10, "capped": 0}
    assert "requests:" in render_text(status)
    assert "40 (on 75%, off 25%, capped 0%" in render_text(status)
    plain = status_of(counters(SPECULATING))
    assert plain.requests is None and "requests" not in json.loads(plain.to_json())
    assert "requests:" not in render_text(plain)


def test_requests_in_a_watch_window_are_the_increase() -> None:
    old = counters(SPECULATING + REQUESTS)
    new = counters(SPECULATING + REQUESTS.replace("} 30.0", "} 36.0"))
    assert status_of(window(new, old)).requests == {"on": 6, "off": 0, "capped": 0}

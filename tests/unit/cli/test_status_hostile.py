"""`vllm-specdec status` against hostile or broken servers and addresses.

Each case ends with its documented exit status and one line: 1 when the server cannot be
read (network and protocol errors, too large, too slow), 2 for an address or flag that is not
valid. The memory and time classes run the CLI in a child process under limits.
"""

from __future__ import annotations

import base64
import contextlib
import json
import socket
import threading
import time
from collections.abc import Callable, Iterator

import pytest
from support.bounded import Bounded, run_bounded

from vllm_specdec_plugin import cli
from vllm_specdec_plugin.cli import scrape
from vllm_specdec_plugin.cli import status as status_cli
from vllm_specdec_plugin.core.limits import MAX_METRICS_BYTES

COUNTERS = ('vllm:spec_decode_num_drafts_total{engine="0"} 8\n'
            'vllm:spec_decode_num_draft_tokens_total{engine="0"} 40\n'
            'vllm:spec_decode_num_accepted_tokens_total{engine="0"} 24\n')


class RawServer:
    """A loopback TCP server that hands each connection to `handle` (in a thread)."""

    def __init__(self, handle: Callable[[socket.socket], None]) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.url = f"127.0.0.1:{self.sock.getsockname()[1]}"
        self.requests: list[bytes] = []
        self.handle = handle
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._one, args=(conn,), daemon=True).start()

    def _one(self, conn: socket.socket) -> None:
        with conn, contextlib.suppress(OSError):
            conn.settimeout(30)
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = conn.recv(4096)
                if not chunk:
                    return
                data += chunk
            self.requests.append(data)
            self.handle(conn)

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def server() -> Iterator[Callable[[Callable[[socket.socket], None]], RawServer]]:
    started: list[RawServer] = []

    def start(handle: Callable[[socket.socket], None]) -> RawServer:
        started.append(RawServer(handle))
        return started[-1]

    yield start
    for one in started:
        one.close()


def answer(body: str, headers: str = "") -> Callable[[socket.socket], None]:
    def handle(conn: socket.socket) -> None:
        data = body.encode()
        conn.sendall(f"HTTP/1.1 200 OK\r\nContent-Length: {len(data)}\r\n{headers}\r\n".encode()
                     + data)
    return handle


def status_in_child(url: str, memory_mib: int = 256, timeout_s: float = 40,
                    extra: tuple[str, ...] = ()) -> Bounded:
    return run_bounded(f"""
        import sys
        from vllm_specdec_plugin import cli
        sys.exit(cli.main(["status", "--url", {url!r}, *{list(extra)!r}]))
    """, memory_mib=memory_mib, timeout_s=timeout_s)


def one_line(text: str) -> str:
    lines = text.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in text, text
    return lines[0]


def test_endless_body_is_cut_at_the_size_cap(server):
    """Today's code read an endless body into memory until it ran out."""
    def endless(conn: socket.socket) -> None:
        conn.sendall(b"HTTP/1.0 200 OK\r\n\r\n")
        line = b"vllm:x 1\n" * 8192
        while True:
            conn.sendall(line)

    url = server(endless).url
    done = status_in_child(url, memory_mib=256)
    assert done.returncode == 1, done
    assert f"answered more than {MAX_METRICS_BYTES} bytes" in one_line(done.stderr)


# The deadline the scrape tests set (scrape.FETCH_TIMEOUT_S, in the child) and the slack they
# allow past it; a hostile server keeps going for TRICKLE_FOR_S (longer than deadline + slack),
# then stops by itself, and stops at once when the client hangs up.
DEADLINE_S, SLACK_S, TRICKLE_FOR_S = 1.0, 2.0, 12.0
OK_HEAD = b"HTTP/1.1 200 OK\r\n"


def trickle(head: bytes, piece: bytes) -> Callable[[socket.socket], None]:
    """Send `head`, then `piece` every 0.5 s; an empty `piece`: silence until the client
    hangs up. Either way for at most TRICKLE_FOR_S."""
    def handle(conn: socket.socket) -> None:
        conn.settimeout(TRICKLE_FOR_S)
        conn.sendall(head)
        end = time.monotonic() + TRICKLE_FOR_S
        while piece and time.monotonic() < end:
            time.sleep(0.5)
            conn.sendall(piece)
        if not piece:
            conn.recv(1)
    return handle


def status_timed(url: str, extra: tuple[str, ...] = ()) -> tuple[int, float, str]:
    """`vllm-specdec status --url url` in a child with the scrape deadline at DEADLINE_S:
    (exit status, seconds the command took, stderr)."""
    done = run_bounded(f"""
        import time
        from vllm_specdec_plugin import cli
        from vllm_specdec_plugin.cli import scrape
        scrape.FETCH_TIMEOUT_S = {DEADLINE_S}
        start = time.monotonic()
        code = cli.main(["status", "--url", {url!r}, *{list(extra)!r}])
        print("exit", code, time.monotonic() - start)
    """, timeout_s=TRICKLE_FOR_S + 8)
    assert done.returncode == 0, done
    _, code, seconds = done.stdout.strip().splitlines()[-1].split()
    return int(code), float(seconds), done.stderr


@pytest.mark.parametrize(("head", "piece"), [
    pytest.param(OK_HEAD + b"Connection: close\r\n\r\n", b"v", id="close, no length"),
    pytest.param(OK_HEAD + b"Connection: close\r\nContent-Length: 100000\r\n\r\n", b"v",
                 id="close, Content-Length"),
    pytest.param(b"HTTP/1.0 200 OK\r\n\r\n", b"v", id="HTTP/1.0, no length"),
    pytest.param(OK_HEAD + b"Transfer-Encoding: chunked\r\n\r\n", b"1\r\nv\r\n",
                 id="chunked, keep-alive"),
    pytest.param(OK_HEAD + b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n",
                 b"1\r\nv\r\n", id="chunked, close"),
    pytest.param(OK_HEAD + b"Transfer-Encoding: chunked\r\n\r\n", b"0",
                 id="chunk-size line trickled"),
    pytest.param(OK_HEAD + b"Content-Length: 100000\r\n\r\n", b"v",
                 id="keep-alive, Content-Length"),
    pytest.param(OK_HEAD + b"X-Slow: ", b"x", id="headers trickled"),
    pytest.param(OK_HEAD + b"Content-Length: 100\r\n\r\n", b"", id="headers, then silent"),
    pytest.param(b"", b"", id="silent before headers"),
])
def test_no_server_holds_a_scrape_past_its_deadline(server, head, piece):
    """A server answering 200 with `Connection: close`, then a byte every 2 s, held the
    command for 100 s: http.client times each receive, not the answer, and the watchdog
    had no socket left to shut down once the response owned it. One deadline per scrape."""
    url = server(trickle(head, piece)).url
    code, seconds, err = status_timed(url)
    assert code == 1 and seconds < DEADLINE_S + SLACK_S, (code, seconds, err)
    assert (f"http://{url}/metrics did not answer within {DEADLINE_S:g} s, the deadline for "
            "one scrape; check that the address") in one_line(err)


def test_watch_scrapes_each_end_by_the_deadline(server):
    """--watch retries a scrape that ran out of time, and each try is held to the deadline."""
    tries: list[int] = []
    slow = trickle(OK_HEAD + b"Connection: close\r\n\r\n", b"v")

    def slow_once(conn: socket.socket) -> None:
        tries.append(1)
        (slow if len(tries) == 1 else answer(COUNTERS))(conn)

    url = server(slow_once).url
    code, seconds, err = status_timed(url, ("--watch", "0.1", "--count", "1"))
    assert code == 0 and seconds < DEADLINE_S + SLACK_S and len(tries) == 3, (code, seconds, err)
    assert f"did not answer within {DEADLINE_S:g} s" in one_line(err)
    assert "retrying in 0.1s" in err


def test_a_hanging_name_lookup_ends_by_the_deadline():
    """getaddrinfo has no timeout of its own; the scrape's deadline covers it too."""
    done = run_bounded("""
        import socket, time
        from vllm_specdec_plugin.cli import scrape
        socket.getaddrinfo = lambda *args, **kwargs: time.sleep(20)
        start = time.monotonic()
        try:
            scrape.fetch("http://metrics.example:8000/metrics", timeout=1)
        except scrape.StatusError as exc:
            print(round(time.monotonic() - start, 1), exc)
    """, timeout_s=30)
    assert done.returncode == 0 and "did not answer within 1 s" in done.stdout, done
    assert float(done.stdout.split()[0]) < 1 + SLACK_S


def test_the_cli_deadline_is_the_scrape_deadline():
    assert scrape.FETCH_TIMEOUT_S == 10.0


@pytest.mark.parametrize(("name", "handle", "needle"), [
    ("not HTTP", lambda c: c.sendall(b"SSH-2.0-OpenSSH_9.6\r\n"), "did not answer as an HTTP"),
    ("closed at once", lambda c: None, "did not answer as an HTTP server (RemoteDisconnected"),
    ("truncated body", lambda c: c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n"
                                           b"vllm:x 1\n"), "IncompleteRead"),
    ("header line too long", lambda c: c.sendall(b"HTTP/1.1 200 OK\r\nX: " + b"a" * 70000),
     "did not answer as an HTTP server"),
    ("bad status code", lambda c: c.sendall(b"HTTP/1.1 9999 Weird\r\n\r\n"), "did not answer"),
])
def test_protocol_errors_are_one_line_exit_1(server, capsys, name, handle, needle):
    url = server(handle).url
    assert cli.main(["status", "--url", url]) == 1, name
    assert needle in one_line(capsys.readouterr().err)


def test_http_error_reason_is_escaped(server, capsys):
    def teapot(conn: socket.socket) -> None:
        conn.sendall(b"HTTP/1.1 418 \x1b[2J\x1b]0;owned\x07\r\nContent-Length: 0\r\n\r\n")

    assert cli.main(["status", "--url", server(teapot).url]) == 1
    err = one_line(capsys.readouterr().err)
    assert "answered HTTP 418" in err and "\x1b" not in err and "\\x1b[2J" in err


@pytest.mark.parametrize(("url", "needle"), [
    ("http://local host:8000", "contains a space or a control character"),
    ("localhost:99999", "has a bad host or port"),
    ("localhost:abc", "has a bad host or port"),
    ("http://[::1", "is not a URL"),
    ("http://h\x1b[31m:1", "contains a space or a control character"),
    ("ftp://x", "is not an http(s) address"),
])
def test_bad_addresses_exit_2_with_one_line(capsys, url, needle):
    assert cli.main(["status", "--url", url]) == 2
    err = one_line(capsys.readouterr().err)
    assert needle in err and "\x1b" not in err


def test_unknown_host_exit_1(capsys):
    assert cli.main(["status", "--url", "no-such-host.invalid:8000"]) == 1
    assert "cannot reach http://no-such-host.invalid:8000/metrics" in one_line(
        capsys.readouterr().err)


@pytest.mark.parametrize("value", ["inf", "nan", "-1", "0", "1e9", "soon"])
def test_watch_values_are_bounded(capsys, value):
    with pytest.raises(SystemExit) as exc:
        status_cli.main(["--url", "h", "--watch", value])
    assert exc.value.code == 2
    assert "--watch: must be a number of seconds from 0.1 to 86400" in capsys.readouterr().err


def test_nan_and_infinite_counters_do_not_crash(server, capsys):
    body = (COUNTERS + "vllm:spec_decode_num_drafts_total{engine=\"1\"} NaN\n"
            "vllm:spec_decode_num_accepted_tokens_total{engine=\"1\"} +Inf\n"
            "vllm:spec_decode_num_draft_tokens_total{engine=\"1\"} 1e308\n"
            "vllm:spec_decode_num_draft_tokens_total{engine=\"2\"} 1e308\n")
    url = server(answer(body)).url
    assert cli.main(["status", "--url", url, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert (data["drafts"], data["draft_tokens"], data["accepted_tokens"]) == (8, 40, 24)
    assert cli.main(["status", "--url", url]) == 0
    assert "60.0%" in capsys.readouterr().out


def test_terminal_escapes_in_labels_are_escaped(server, capsys):
    evil = "ngram\x1b]0;pwned\x07\x1b[2J\u202e"
    body = (f'vllm_specdec_decision_info{{method="{evil}",source="s\x9b1m",'
            'num_speculative_tokens="5"} 1\n' + COUNTERS)
    url = server(answer(body)).url
    assert cli.main(["status", "--url", url]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\x07" not in out and "\x9b" not in out and "\u202e" not in out
    assert "ngram\\x1b]0;pwned\\x07\\x1b[2J\\u202e k=5" in out
    assert cli.main(["status", "--url", url, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["decision"]["method"] == evil  # JSON escapes


def test_huge_position_label_is_bounded(server):
    """`position="100000000000"` made today's code build a list that long."""
    body = COUNTERS + ('vllm:spec_decode_num_accepted_tokens_per_pos_total{position="0"} 7\n'
                       'vllm:spec_decode_num_accepted_tokens_per_pos_total'
                       '{position="100000000000"} 5\n'
                       'vllm:spec_decode_num_accepted_tokens_per_pos_total{position="²"} 5\n')
    done = status_in_child(server(answer(body)).url, memory_mib=256, extra=("--json",))
    assert done.returncode == 0, done
    assert json.loads(done.stdout)["per_position"] == [0.875]


def test_credentials_are_sent_as_basic_auth_and_never_printed(server, capsys):
    one = server(answer(COUNTERS))
    password = "s3cr@t:pw"
    url = f"http://alice:s3cr%40t%3Apw@{one.url}"
    assert cli.main(["status", "--url", url]) == 0
    request = one.requests[-1].decode()
    token = base64.b64encode(f"alice:{password}".encode()).decode()
    assert f"Authorization: Basic {token}" in request
    assert "s3cr" not in capsys.readouterr().out

    def denied(conn: socket.socket) -> None:
        conn.sendall(b"HTTP/1.1 401 Unauthorized\r\nContent-Length: 0\r\n\r\n")

    for address in (f"http://alice:{password}@{server(denied).url}",
                    "http://alice:hunter2@no-such-host.invalid", "ftp://alice:hunter2@x",
                    "http://alice:hunter2@h:99999"):
        assert cli.main(["status", "--url", address]) in (1, 2)
        err = one_line(capsys.readouterr().err)
        assert "hunter2" not in err and "s3cr" not in err and "<redacted>@" in err


def test_redirects_are_followed_without_leaking_credentials(server, capsys):
    final = server(answer(COUNTERS))

    def moved(conn: socket.socket) -> None:
        conn.sendall(f"HTTP/1.1 302 Found\r\nLocation: http://localhost:"
                     f"{final.url.split(':')[1]}/metrics\r\nContent-Length: 0\r\n\r\n".encode())

    first = server(moved)
    assert cli.main(["status", "--url", f"http://bob:pw@{first.url}"]) == 0
    assert "Authorization" in first.requests[-1].decode()
    assert "Authorization" not in final.requests[-1].decode()  # another host: not sent there

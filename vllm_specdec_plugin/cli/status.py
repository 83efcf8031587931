"""`vllm-specdec status --url URL [--json] [--watch SECONDS [--count N]]`: read a server's /metrics.

Fetching and printing only; the figures and the verdict come from `status_text.py`.
"""

from __future__ import annotations

import argparse
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator, Sequence

from vllm_specdec_plugin.cli.status_text import (
    Counters,
    Status,
    iter_windows,
    parse_metrics,
    read_counters,
    render_text,
    status_of,
)

EXIT_OK, EXIT_UNREACHABLE, EXIT_INVALID = 0, 1, 2
DEFAULT_URL = "http://localhost:8000"
FETCH_TIMEOUT_S = 10.0


class StatusError(Exception):
    """The server cannot be read; the message names the URL and what to check."""


def metrics_url(url: str) -> str:
    """`URL/metrics` for a server address (with or without scheme or the /metrics path)."""
    text = url.strip()
    if "://" not in text:
        text = "http://" + text
    parts = urllib.parse.urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"--url {url!r} is not an http(s) address; give the server's address, "
                         f"e.g. {DEFAULT_URL}")
    path = parts.path.rstrip("/")
    if not path.endswith("/metrics"):
        path += "/metrics"
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, path, "", ""))


def fetch(url: str, timeout: float = FETCH_TIMEOUT_S) -> str:
    """The /metrics text at `url`, or a StatusError that says what went wrong."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            body: bytes = response.read()
            return body.decode("utf-8", "replace")
    except urllib.error.HTTPError as exc:
        raise StatusError(f"{url} answered HTTP {exc.code} ({exc.reason}); point --url at the "
                          "vLLM server's address") from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise StatusError(f"cannot reach {url} ({reason}); is the server running, and are the "
                          "host and port right?") from None


def scrape(url: str, fetcher: Callable[[str], str] = fetch) -> Counters:
    counters = read_counters(parse_metrics(fetcher(url)))
    if not counters.engine_stats and counters.decision is None:
        raise StatusError(f"{url} serves no vLLM metrics; is it a vLLM server?")
    return counters


def timed_scrapes(url: str, interval: float, count: int | None,
                  fetcher: Callable[[str], str] = fetch,
                  sleep: Callable[[float], None] = time.sleep,
                  clock: Callable[[], float] = time.monotonic) -> Iterator[tuple[float, Counters]]:
    """`count` + 1 scrapes `interval` seconds apart (endless with count None)."""
    done = 0
    while True:
        yield clock(), scrape(url, fetcher)
        if count is not None and done >= count:
            return
        done += 1
        sleep(interval)


def main(argv: Sequence[str], fetcher: Callable[[str], str] = fetch,
         sleep: Callable[[float], None] = time.sleep) -> int:
    parser = argparse.ArgumentParser(
        prog="vllm-specdec status",
        description="Show a running vLLM server's speculative-decoding decision, drafts, "
                    "acceptance and a verdict, from its /metrics.")
    parser.add_argument("--url", default=DEFAULT_URL, help=f"the server (default {DEFAULT_URL})")
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.add_argument("--watch", type=float, metavar="SECONDS",
                        help="refresh every SECONDS with figures over the last window")
    parser.add_argument("--count", type=int, metavar="N",
                        help="with --watch: stop after N refreshes (default: until Ctrl-C)")
    args = parser.parse_args(argv)
    if args.watch is not None and not args.watch > 0:
        parser.error(f"--watch must be a positive number of seconds, got {args.watch:g}")
    if args.count is not None and (args.watch is None or args.count < 1):
        parser.error("--count needs --watch and a positive number")
    try:
        url = metrics_url(args.url)
    except ValueError as exc:
        print(f"vllm-specdec: {exc}", file=sys.stderr)
        return EXIT_INVALID
    try:
        if args.watch is None:
            show(status_of(scrape(url, fetcher)), args.json, indent=2)
            return EXIT_OK
        for status in iter_windows(timed_scrapes(url, args.watch, args.count, fetcher, sleep)):
            if not args.json:
                print(f"== {time.strftime('%H:%M:%S')}")
            show(status, args.json, indent=None)  # --json: one JSON object per line
    except StatusError as exc:
        print(f"vllm-specdec: {exc}", file=sys.stderr)
        return EXIT_UNREACHABLE
    except KeyboardInterrupt:
        pass
    return EXIT_OK


def show(status: Status, as_json: bool, indent: int | None) -> None:
    print(status.to_json(indent) if as_json else render_text(status), flush=True)

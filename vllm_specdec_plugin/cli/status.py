"""`vllm-specdec status --url URL [--json] [--watch SECONDS [--count N]]`: read a server's /metrics.

The command: its flags, the one-shot and `--watch` runs, exit statuses. Scraping is
`cli/scrape.py`'s, the figures and verdict `cli/status_figures.py`'s, the text report
`cli/status_render.py`'s, the reading of /metrics `inputs/vllm_metrics.py`'s.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Callable, Sequence

from vllm_specdec_plugin.cli.scrape import (
    DEFAULT_URL,
    StatusError,
    fetch,
    metrics_url,
    scrape,
    timed_scrapes,
)
from vllm_specdec_plugin.cli.status_figures import Status, iter_windows, status_of
from vllm_specdec_plugin.cli.status_render import render_text
from vllm_specdec_plugin.core.errors import quote_value
from vllm_specdec_plugin.core.limits import MAX_WATCH_S, MIN_WATCH_S

EXIT_OK, EXIT_UNREACHABLE, EXIT_INVALID = 0, 1, 2


def main(argv: Sequence[str], fetcher: Callable[[str], str] = fetch,
         sleep: Callable[[float], None] = time.sleep) -> int:
    parser = argparse.ArgumentParser(
        prog="vllm-specdec status",
        description="Show a running vLLM server's speculative-decoding decision, drafts, "
                    "acceptance and a verdict, from its /metrics.")
    parser.add_argument("--url", default=DEFAULT_URL, help=f"the server (default {DEFAULT_URL})")
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.add_argument("--watch", type=watch_seconds, metavar="SECONDS",
                        help="refresh every SECONDS with figures over the last window "
                             f"({MIN_WATCH_S:g} to {MAX_WATCH_S:g})")
    parser.add_argument("--count", type=int, metavar="N",
                        help="with --watch: stop after N refreshes (default: until Ctrl-C)")
    args = parser.parse_args(argv)
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


def watch_seconds(text: str) -> float:
    """`--watch`: a finite number of seconds between `MIN_WATCH_S` and `MAX_WATCH_S`."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or not MIN_WATCH_S <= value <= MAX_WATCH_S:
        raise argparse.ArgumentTypeError(
            f"must be a number of seconds from {MIN_WATCH_S:g} to {MAX_WATCH_S:g}, got "
            f"{quote_value(text)}")
    return value


def show(status: Status, as_json: bool, indent: int | None) -> None:
    print(status.to_json(indent) if as_json else render_text(status), flush=True)

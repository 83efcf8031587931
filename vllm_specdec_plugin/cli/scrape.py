"""Scraping a server's /metrics for `vllm-specdec status`: the address, one bounded GET, retries.

`metrics_url` checks `--url`; `fetch` reads the body under one deadline and the size cap
(`cli/deadline_http.py` holds every step to the deadline); `scrape` reads it into `Counters`
(`inputs/vllm_metrics.py`); `timed_scrapes` is `--watch`'s loop, which keeps going through
failed scrapes. Every failure is a `StatusError` whose one line names the URL and what to check.
"""

from __future__ import annotations

import base64
import http.client
import socket
import sys
import time
import urllib.parse
from collections.abc import Callable, Iterator

from vllm_specdec_plugin.cli.deadline_http import connection_until
from vllm_specdec_plugin.core.errors import quote_value
from vllm_specdec_plugin.core.limits import (
    MAX_METRICS_BYTES,
    MAX_REDIRECTS,
    SCRAPE_DEADLINE_S,
    printable,
)
from vllm_specdec_plugin.core.redact import REDACTED
from vllm_specdec_plugin.inputs.vllm_metrics import Counters, iter_metrics, read_counters

DEFAULT_URL = "http://localhost:8000"
FETCH_TIMEOUT_S = SCRAPE_DEADLINE_S
_REDIRECTS = (301, 302, 303, 307, 308)
_CHUNK = 65536


class StatusError(Exception):
    """The server cannot be read; the message names the URL and what to check."""


def metrics_url(url: str) -> str:
    """`URL/metrics` for a server address (with or without scheme or the /metrics path).

    Credentials in the address (`http://user:password@host`) are kept for `fetch`, which
    sends them as HTTP basic auth; no message ever shows them (`shown_url`). An address that
    is not a plain http(s) URL is a ValueError whose message says so.
    """
    text = url.strip()
    if "://" not in text:
        text = "http://" + text
    example = f"give the server's address, e.g. {DEFAULT_URL}"
    if any(not ch.isprintable() or ch.isspace() for ch in text):
        raise ValueError(f"--url {quote_value(shown_url(url))} contains a space or a control "
                         f"character; {example}")
    try:
        parts = urllib.parse.urlsplit(text)
    except ValueError as exc:  # "Invalid IPv6 URL"
        raise ValueError(f"--url {quote_value(shown_url(url))} is not a URL ({exc}); "
                         f"{example}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"--url {quote_value(shown_url(url))} is not an http(s) address; "
                         f"{example}")
    try:
        parts.port  # noqa: B018 - urllib checks the port only when it is read
        parts.hostname.encode("idna")
    except (ValueError, UnicodeError) as exc:
        raise ValueError(f"--url {quote_value(shown_url(url))} has a bad host or port "
                         f"({exc}); {example}") from None
    path = parts.path.rstrip("/")
    if not path.endswith("/metrics"):
        path += "/metrics"
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, path, "", ""))


def shown_url(url: str) -> str:
    """`url` as it may be printed: credentials replaced, control characters escaped."""
    head, sep, rest = url.partition("://")
    if not sep:
        head, rest = "", head
    authority_end = min((i for i in (rest.find(c) for c in "/?#") if i >= 0), default=len(rest))
    authority = rest[:authority_end]
    if "@" in authority:
        rest = f"{REDACTED}@" + rest[authority.rindex("@") + 1:]
    return printable(f"{head}{sep}{rest}")


def fetch(url: str, timeout: float | None = None) -> str:
    """The /metrics text at `url`, or a StatusError that says what went wrong.

    One deadline (`FETCH_TIMEOUT_S` unless `timeout` is given) bounds the whole scrape:
    lookup, connect, TLS, request, headers, body and redirects, whatever the server sends
    (`cli/deadline_http.py`). The body is read up to `MAX_METRICS_BYTES`; credentials in
    `url` go out as HTTP basic auth, only to the host they were given for.
    """
    timeout = FETCH_TIMEOUT_S if timeout is None else timeout
    deadline = time.monotonic() + timeout
    shown = shown_url(url)
    for _ in range(MAX_REDIRECTS + 1):
        status, reason, location, body = _get_once(url, deadline, shown, timeout)
        if status in _REDIRECTS and location:
            target = urllib.parse.urljoin(url, location)
            if urllib.parse.urlsplit(target).scheme not in ("http", "https"):
                raise StatusError(f"{shown} redirects to {quote_value(shown_url(target))}, "
                                  "which is not http(s); point --url at the vLLM server")
            if urllib.parse.urlsplit(target).hostname != urllib.parse.urlsplit(url).hostname:
                target = _without_credentials(target)
            url, shown = target, shown_url(target)
            continue
        if status != 200:
            raise StatusError(f"{shown} answered HTTP {status} ({printable(reason[:80])}); "
                              "point --url at the vLLM server's address")
        return body.decode("utf-8", "replace")
    raise StatusError(f"{shown} redirects more than {MAX_REDIRECTS} times; point --url at "
                      "the vLLM server's address")


def _without_credentials(url: str) -> str:
    parts = urllib.parse.urlsplit(url)
    netloc = parts.netloc.rpartition("@")[2]
    return urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, parts.query, ""))


def _get_once(url: str, deadline: float, shown: str,
              timeout: float) -> tuple[int, str, str | None, bytes]:
    """One GET under the overall deadline: (status, reason, Location, body)."""
    parts = urllib.parse.urlsplit(url)
    headers = {"Accept": "text/plain", "Accept-Encoding": "identity",
               "User-Agent": "vllm-specdec-status"}
    if parts.username is not None or parts.password is not None:
        user = urllib.parse.unquote(parts.username or "")
        password = urllib.parse.unquote(parts.password or "")
        token = base64.b64encode(f"{user}:{password}".encode()).decode("ascii")
        headers["Authorization"] = f"Basic {token}"
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    try:
        with connection_until(parts, deadline) as connection:
            connection.request("GET", path, headers=headers)
            response = connection.getresponse()
            body = _read_body(response, shown)
        return response.status, response.reason or "", response.getheader("Location"), body
    except StatusError:
        raise
    except TimeoutError:
        raise StatusError(f"{shown} did not answer within {timeout:g} s, the deadline for one "
                          "scrape; check that the address is the vLLM server's HTTP port and "
                          "that the server is not overloaded") from None
    except (http.client.HTTPException, OSError, ValueError) as exc:
        raise StatusError(_network_error(shown, exc)) from None


def _read_body(response: http.client.HTTPResponse, shown: str) -> bytes:
    chunks: list[bytes] = []
    size = 0
    while True:
        chunk = response.read(_CHUNK)
        if not chunk:
            if response.length:  # the connection closed before Content-Length was read
                raise http.client.IncompleteRead(b"".join(chunks), response.length)
            return b"".join(chunks)
        size += len(chunk)
        if size > MAX_METRICS_BYTES:
            raise StatusError(f"{shown} answered more than {MAX_METRICS_BYTES} bytes; point "
                              "--url at the vLLM server's /metrics")
        chunks.append(chunk)


def _network_error(shown: str, exc: BaseException) -> str:
    """One line for a network or protocol failure (the exception's own words, escaped)."""
    if isinstance(exc, http.client.HTTPException):
        detail = f"{type(exc).__name__}: {printable(str(exc)[:120])}" if str(exc) else (
            type(exc).__name__)
        return (f"{shown} did not answer as an HTTP server ({detail}); is the address the "
                "vLLM server's HTTP port?")
    reason = getattr(exc, "strerror", None) or getattr(exc, "reason", None) or exc
    if isinstance(exc, socket.gaierror):
        reason = f"host not found: {exc.strerror or exc}"
    return (f"cannot reach {shown} ({printable(str(reason)[:160])}); is the server running, "
            "and are the host and port right?")


def scrape(url: str, fetcher: Callable[[str], str] = fetch) -> Counters:
    counters = read_counters(iter_metrics(fetcher(url)))
    if not counters.engine_stats and counters.decision is None:
        raise StatusError(f"{shown_url(url)} serves no vLLM metrics; is it a vLLM server?")
    return counters


# --watch keeps watching through failed scrapes (a `kubectl port-forward` blip, a restarting
# pod): each failure is said on stderr, the wait doubles up to this many intervals, and this many
# failures in a row end it with the last error.
WATCH_MAX_FAILURES = 6
WATCH_MAX_BACKOFF = 8


def timed_scrapes(url: str, interval: float, count: int | None,
                  fetcher: Callable[[str], str] = fetch,
                  sleep: Callable[[float], None] = time.sleep,
                  clock: Callable[[], float] = time.monotonic) -> Iterator[tuple[float, Counters]]:
    """`count` + 1 good scrapes `interval` seconds apart (endless with count None); a failed
    scrape is reported and retried with backoff, up to WATCH_MAX_FAILURES in a row."""
    done, failures = 0, 0
    while True:
        try:
            sample = clock(), scrape(url, fetcher)
        except StatusError as exc:
            failures += 1
            if failures >= WATCH_MAX_FAILURES:
                raise StatusError(f"{exc} ({failures} scrapes in a row failed; stopped "
                                  "watching)") from None
            wait = min(interval * 2 ** (failures - 1), interval * WATCH_MAX_BACKOFF)
            print(f"vllm-specdec: scrape failed ({exc}); retrying in {wait:g}s "
                  f"({failures}/{WATCH_MAX_FAILURES - 1} retries)", file=sys.stderr, flush=True)
            sleep(wait)
            continue
        failures = 0
        yield sample
        if count is not None and done >= count:
            return
        done += 1
        sleep(interval)

"""HTTP connections for `vllm-specdec status` whose every step ends by one deadline.

http.client times each socket operation, not the exchange: it reads a header line, a
chunk-size line or `read(n)` in loops of receives, so a server that sends a byte per timeout
holds it forever; and once an answer is not keep-alive, `getresponse()` hands the socket to
the response, so the connection has nothing left to shut down. Here the caller owns the
socket, and every step (lookup, connect, TLS handshake, send, each receive) gets only the
time left before the deadline and raises TimeoutError past it.
"""

from __future__ import annotations

import contextlib
import http.client
import io
import socket
import ssl
import threading
import time
import urllib.parse
from collections.abc import Iterator
from typing import Any, cast


@contextlib.contextmanager
def connection_until(parts: urllib.parse.SplitResult,
                     deadline: float) -> Iterator[http.client.HTTPConnection]:
    """An HTTP(S) connection to `parts`' host, connected, that fails with TimeoutError at
    `deadline` (a `time.monotonic()` value) whatever the server does; closed on exit."""
    host = parts.hostname or ""
    https = parts.scheme == "https"
    port = parts.port or (443 if https else 80)
    context = ssl.create_default_context() if https else None
    sock = _connect(host, port, deadline, context)
    try:
        # The connection only writes the request and parses the answer through this socket:
        # it never connects, and its close() leaves the socket to the `finally` below.
        connection = (http.client.HTTPSConnection(host, port, context=context) if https
                      else http.client.HTTPConnection(host, port))
        connection.sock = cast(socket.socket, _DeadlineSocket(sock, deadline))
        yield connection
    finally:
        sock.close()


def time_left(deadline: float) -> float:
    """Seconds until `deadline`; TimeoutError when none are left."""
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError
    return left


def _connect(host: str, port: int, deadline: float,
             context: ssl.SSLContext | None) -> socket.socket:
    error: OSError = OSError(f"no address for {host}")
    for family, kind, proto, _, address in _resolve(host, port, deadline):
        sock = socket.socket(family, kind, proto)
        try:
            sock.settimeout(time_left(deadline))
            sock.connect(address)
        except OSError as exc:
            sock.close()
            if isinstance(exc, TimeoutError):  # the time left is spent: no other address
                raise
            error = exc
            continue
        if context is None:
            return sock
        try:
            sock.settimeout(time_left(deadline))  # bounds the whole handshake
            return context.wrap_socket(sock, server_hostname=host)
        except BaseException:
            sock.close()
            raise
    raise error


def _resolve(host: str, port: int, deadline: float) -> list[Any]:
    """getaddrinfo until `deadline`: the resolver has no timeout of its own, so it runs in a
    daemon thread that is left behind (it ends with the resolver's own retries)."""
    found: list[Any] = []

    def lookup() -> None:
        try:
            found.append(socket.getaddrinfo(host, port, type=socket.SOCK_STREAM))
        except Exception as exc:  # noqa: BLE001 - raised in the caller's thread below
            found.append(exc)

    resolver = threading.Thread(target=lookup, daemon=True, name="vllm-specdec-resolve")
    resolver.start()
    resolver.join(time_left(deadline))
    if not found:
        raise TimeoutError
    if isinstance(found[0], Exception):
        raise found[0]
    return cast(list[Any], found[0])


class _DeadlineSocket:
    """The socket as http.client uses it (sendall, makefile, close), held to `deadline`."""

    def __init__(self, sock: socket.socket, deadline: float) -> None:
        self._sock, self._deadline = sock, deadline

    def sendall(self, data: bytes) -> None:
        self._sock.settimeout(time_left(self._deadline))  # the whole sendall, not each send
        self._sock.sendall(data)

    def makefile(self, mode: str) -> io.BufferedReader:
        return io.BufferedReader(_DeadlineReader(self._sock, self._deadline))

    def close(self) -> None:
        """http.client closes its socket when the response takes over; the socket's owner
        (`connection_until`) closes it when the body is read."""


class _DeadlineReader(io.RawIOBase):
    def __init__(self, sock: socket.socket, deadline: float) -> None:
        super().__init__()
        self._sock, self._deadline = sock, deadline

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        self._sock.settimeout(time_left(self._deadline))
        return self._sock.recv_into(buffer)

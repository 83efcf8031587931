"""Credentials out of every string the plugin prints or exports (pure).

A model is named by a hub id, a local path or a URI (`s3://`, `gs://`, `https://`, `hf://`), and
a URI can carry credentials: in its userinfo (`s3://KEY:SECRET@bucket/m`,
`https://TOKEN@host/m`) or in its query (`?token=...`, a presigned URL's `X-Amz-Signature=...`).
`redact_uri` replaces them with `REDACTED` wherever they stand in a text, so it serves a bare
model string and a line quoting one alike: the dry-run JSON, the INFO line, the metrics labels,
`explain` and the error messages (`core.errors`) all go through it.

What counts as userinfo: after `scheme://`, everything up to the last `@` before the first `?`,
`#` or whitespace, when a `:` comes before the first `/` (a password may hold raw `@`, `:` and
`/`, as AWS secret keys hold `/`), else up to the last `@` before the first `/`. So
`http://host:8080/p@x` shows as `http://<redacted>@x`: redacting too much beats printing a
secret. A `?` or `#` in a password must be percent-encoded (RFC 3986; every URL parser, vLLM's
too, ends the authority there). A credential hidden under percent-encoding (a URI inside another
URI's query, an encoded parameter name) is found by decoding: the text is then shown decoded.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import unquote, unquote_plus

REDACTED = "<redacted>"

# Runs of text a URI's authority cannot leave: it ends at `?`, `#` or whitespace.
_AUTHORITY_RUN = re.compile(r"[^?#\s]+")
# `name=` after `?`, `&` or `#` (a query or a fragment); its value runs to `&`, `#` or
# whitespace (a value may hold `?`, and another URI's query: each name is looked at).
_PARAM_NAME = re.compile(r"(?<=[?&#])([^=&#?\s]+)=")
_VALUE_END = re.compile(r"[&#\s]")
_SECRET_PARAM = re.compile(
    r"token|key|secret|pass|pwd|sig|credential|auth|session|private|cookie|^x-(amz|goog)-",
    re.IGNORECASE)
"""A query parameter whose (decoded) name matches holds a credential; the net is wide on
purpose (`key` also catches `monkey`): a name wrongly hidden costs nothing."""
_MAX_DECODINGS = 8
"""Percent-encoding levels looked through (each one shortens the text, so this bounds time).
Text encoded deeper than that cannot be vetted: each run of it still holding an escape is
hidden whole (`redact_uri`)."""
_RUN = re.compile(r"\S+")
_ESCAPE = re.compile(r"%[0-9A-Fa-f]{2}")


def redact_uri(text: str) -> str:
    """`text` with every credential in a URI (userinfo, secret query parameters) replaced by
    `REDACTED`; a hub id, a local path or a URI without credentials comes back unchanged."""
    shown = level = _redact_once(text)
    for _ in range(_MAX_DECODINGS):
        decoded = unquote(level)
        if decoded == level:
            return shown
        level = _redact_once(decoded)
        if level != decoded:  # decoding revealed a credential: show the decoded text
            shown = level
    if unquote(level) == level:
        return shown
    # Encoded deeper than looked through (a URI nested in a query nine times): what it hides
    # is unknown, so every run still holding an escape goes; hiding too much beats a secret.
    return _RUN.sub(lambda run: REDACTED if _ESCAPE.search(run.group()) else run.group(),
                    level)


def redact_strings(value: Any) -> Any:
    """`value` (JSON-like: dicts, lists, tuples, strings) with `redact_uri` applied to every
    string in it, keys included."""
    if isinstance(value, str):
        return redact_uri(value)
    if isinstance(value, Mapping):
        return {redact_strings(key): redact_strings(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(redact_strings(item) for item in value)
    return value


def _redact_once(text: str) -> str:
    if "://" not in text and "=" not in text:  # the common case: a hub id or a path
        return text
    return _redact_params(_redact_userinfo(text))


def _redact_userinfo(text: str) -> str:
    """Each `scheme://userinfo@` with its userinfo replaced. Written as string scans, not one
    regular expression: a backtracking pattern costs time quadratic in the length of a text
    holding many `://`; here each search stops at the next `/`, so the whole is linear."""
    if "://" not in text:
        return text
    parts: list[str] = []
    done = 0
    for run in _AUTHORITY_RUN.finditer(text):
        run_start, run_end = run.span()
        last_at = text.rfind("@", run_start, run_end)
        start = text.find("://", run_start, last_at) if last_at >= 0 else -1
        while start >= 0:
            start += 3
            slash = text.find("/", start, run_end)
            slash = run_end if slash < 0 else slash
            colon = text.find(":", start, slash)
            if colon >= 0 and text.find("@", start, colon) < 0:
                at = last_at  # user:password, the password may hold '@', ':' and '/'
            else:
                at = text.rfind("@", start, slash)  # the authority's last '@'
            if at >= start:
                parts += [text[done:start], REDACTED]
                done = at
                start = text.find("://", at, last_at)
            else:
                start = text.find("://", start, last_at)
    return "".join(parts) + text[done:] if parts else text


def _redact_params(text: str) -> str:
    """Each secret query parameter's value replaced (linear: a value once redacted is not
    searched again for the names inside it)."""
    parts: list[str] = []
    done = 0
    for name in _PARAM_NAME.finditer(text):
        if name.start() < done or not _SECRET_PARAM.search(unquote_plus(name.group(1))):
            continue
        end_match = _VALUE_END.search(text, name.end())
        end = end_match.start() if end_match else len(text)
        # already redacted (what follows was added later: the quote of a quoted value)
        if not text.startswith(REDACTED, name.end()):
            parts += [text[done:name.end()], REDACTED]
            done = end
    return "".join(parts) + text[done:] if parts else text

"""Keep secrets (HF_HUB tokens and the like) out of the decision, the dry run and the logs.

Flags are redacted by the destination vLLM's own `vllm serve` parser feeds them into, not by
their spelling: `--hf-token`, `--hf_token`, `--hf-tok` (an abbreviation argparse expands),
`--hf-token=T`, and every value of `--api-key K1 K2` all reach a destination listed in
`SECRET_DESTINATIONS`, and whatever reaches one is redacted wherever it appears in the argv.
Credentials inside URIs (the model's, an endpoint's) are `core.redact`'s, for every output.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from vllm_specdec_plugin.core.redact import REDACTED, redact_uri

SECRET_DESTINATIONS = ("hf_token", "api_key")
"""The `vllm serve` destinations (argparse `dest`) whose values are secrets: the one list."""
_SECRET_NAME = re.compile(r"(TOKEN|SECRET|PASSWORD|PASSWD|API_?KEY|CREDENTIAL|PRIVATE)",
                          re.IGNORECASE)
_EMBEDDED_MIN_CHARS = 6
"""A secret this long is also redacted inside other values (a URL's query, a JSON flag)."""


def is_secret_name(name: str) -> bool:
    return bool(_SECRET_NAME.search(name))


def redact_env(env: Mapping[str, str | None]) -> dict[str, str | None]:
    return {key: (REDACTED if value is not None and is_secret_name(key) else
                  None if value is None else redact_uri(value))
            for key, value in env.items()}


def redact_argv(argv: Sequence[str],
                parser_factory: Callable[[], argparse.ArgumentParser] | None = None) -> list[str]:
    """A `vllm serve MODEL FLAGS...` command line (or just its flags) with every secret
    replaced by `REDACTED`: the values vLLM's parser feeds into `SECRET_DESTINATIONS`, and
    credentials in URIs (the model's too)."""
    argv = list(argv)
    head = 2 if argv[:2] == ["vllm", "serve"] else 0
    secrets = _secret_values(argv[head:], parser_factory)
    if secrets is None:  # vLLM's parser could not read them: redact by spelling instead
        secrets = _secret_values_by_spelling(argv[head:])
    return argv[:head] + [_redact_item(item, secrets) for item in argv[head:]]


def _redact_item(item: str, secrets: set[str]) -> str:
    if item in secrets:
        return REDACTED
    if item.startswith("-") and "=" in item:
        flag, value = item.split("=", 1)
        if value in secrets:
            return f"{flag}={REDACTED}"
    for secret in sorted(secrets, key=len, reverse=True):
        if len(secret) >= _EMBEDDED_MIN_CHARS and secret in item:
            item = item.replace(secret, REDACTED)
    return redact_uri(item)


def _secret_values(args: Sequence[str],
                   parser_factory: Callable[[], argparse.ArgumentParser] | None,
                   ) -> set[str] | None:
    """The raw strings vLLM's own parser converts for a secret destination (recorded by
    wrapping those actions' `type`); None when the parser is missing or refuses `args`."""
    try:
        if parser_factory is None:
            from vllm_specdec_plugin.inputs.engine_args import vllm_serve_parser

            parser_factory = vllm_serve_parser
        parser = parser_factory()
    except Exception:  # no vLLM here
        return None
    found: set[str] = set()
    for action in parser._actions:
        if action.dest in SECRET_DESTINATIONS:
            action.type = _recording(action.type, found)
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            parser.parse_args(list(args))
    except (Exception, SystemExit):
        return None
    return {value for value in found if value}


def _recording(convert: Any, found: set[str]) -> Callable[[str], Any]:
    def record(text: str) -> Any:
        found.add(text)
        return convert(text) if callable(convert) else text

    record.__name__ = getattr(convert, "__name__", "str")
    return record


def _secret_values_by_spelling(args: Iterable[str]) -> set[str]:
    """Without vLLM's parser: every value after an option that argparse could expand to a
    secret flag (`--hf_tok` -> `--hf-token`), up to the next option."""
    flags = tuple("--" + dest.replace("_", "-") for dest in SECRET_DESTINATIONS)
    found: set[str] = set()
    taking = False
    for item in args:
        if item.startswith("-") and len(item) > 1 and not item[1].isdigit():
            name, sep, value = item.partition("=")
            name = name.replace("_", "-")
            taking = len(name) > 3 and any(flag.startswith(name) for flag in flags)
            if taking and sep:
                found.add(value)
                taking = False
        elif taking:
            found.add(item)
    return {value for value in found if value}

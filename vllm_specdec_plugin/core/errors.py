"""The plugin's one error type and the helper that quotes bad values safely."""

from __future__ import annotations

from vllm_specdec_plugin.core.redact import redact_uri

EXIT_INVALID = 2
"""Exit status of the processes the project owns (launcher, vllm_entry, explain) on bad input."""


class SpecDecodeConfigError(ValueError):
    """Invalid speculative-decoding input: the engine must not start.

    A ``ValueError``, so an application that builds ``LLM()`` inside ``try/except Exception``
    gets it handed back like vLLM's own config errors. Where the project owns the process (the
    launcher, ``vllm_entry``) it is printed as one line without a traceback; a plain
    ``vllm serve`` prints vLLM's traceback, whose last line is this message. Credentials in a
    URI the message quotes (the model's) are redacted (`core.redact`).
    """

    def __init__(self, message: str) -> None:
        message = redact_uri(message)
        super().__init__(f"vllm-specdec-plugin: {message}")
        self.message = message


def find_config_error(exc: BaseException) -> SpecDecodeConfigError | None:
    """The plugin's error behind `exc`, if vLLM re-raised it as the cause of another error."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, SpecDecodeConfigError):
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None


def quote_value(value: object, limit: int = 60) -> str:
    """A bad value as it may be shown: credentials in a URI redacted, repr-quoted (newlines,
    non-ASCII visible), shortened."""
    value = redact_uri(value if isinstance(value, str) else str(value))
    text = repr(value)
    text = text.encode("ascii", "backslashreplace").decode("ascii")
    if len(text) > limit:
        text = text[: limit - 5] + "...'" + f" ({len(str(value))} chars)"
    return text

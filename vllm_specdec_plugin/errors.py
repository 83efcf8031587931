"""The plugin's one error type and the helper that quotes bad values safely."""

from __future__ import annotations


class SpecDecodeConfigError(SystemExit):
    """Invalid speculative-decoding input: the engine must not start.

    A ``SystemExit`` on purpose: ``vllm serve`` then exits with the message alone (no
    traceback), and the offline ``LLM()`` caller can still catch it by name.
    """

    def __init__(self, message: str) -> None:
        super().__init__(f"vllm-specdec-plugin: {message}")
        self.message = message


def quote_value(value: object, limit: int = 60) -> str:
    """A bad value as it may be shown: repr-quoted (newlines, non-ASCII visible), shortened."""
    text = repr(value) if isinstance(value, str) else repr(str(value))
    text = text.encode("ascii", "backslashreplace").decode("ascii")
    if len(text) > limit:
        text = text[: limit - 5] + "...'" + f" ({len(str(value))} chars)"
    return text

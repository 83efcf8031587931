"""Keep secrets (HF_HUB tokens and the like) out of the decision, the dry run and the logs."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

REDACTED = "<redacted>"
_SECRET_NAME = re.compile(r"(TOKEN|SECRET|PASSWORD|PASSWD|API_?KEY|CREDENTIAL|PRIVATE)",
                          re.IGNORECASE)
_SECRET_FLAGS = ("--hf-token", "--api-key")
_URL_USERINFO = re.compile(r"(?<=://)[^/@\s]+@")


def is_secret_name(name: str) -> bool:
    return bool(_SECRET_NAME.search(name))


def redact_value(text: str) -> str:
    """Strip credentials embedded in URLs (scheme://user:token@host)."""
    return _URL_USERINFO.sub(REDACTED + "@", text)


def redact_env(env: Mapping[str, str | None]) -> dict[str, str | None]:
    return {key: (REDACTED if value is not None and is_secret_name(key) else
                  None if value is None else redact_value(value))
            for key, value in env.items()}


def redact_argv(argv: Sequence[str]) -> list[str]:
    out: list[str] = []
    hide_next = False
    for item in argv:
        if hide_next:
            out.append(REDACTED)
            hide_next = False
        elif item in _SECRET_FLAGS:
            out.append(item)
            hide_next = True
        elif any(item.startswith(flag + "=") for flag in _SECRET_FLAGS):
            out.append(item.split("=", 1)[0] + "=" + REDACTED)
        else:
            out.append(redact_value(item))
    return out

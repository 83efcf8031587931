"""`Timers`: inclusive wall time and calls per labelled part, by wrapping methods in place."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import Any


class Timers:
    """Seconds and calls per label; `wrap` times an attribute of a class, instance or module.

    A part's time includes the parts it calls (each wrapped call is timed from entry to exit),
    and each wrapped call adds the timer's own cost (about 1 µs).
    """

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self.calls: dict[str, int] = {}

    def add(self, label: str, seconds: float) -> None:
        """Count one call of `label` that took `seconds`."""
        self.seconds[label] = self.seconds.get(label, 0.0) + seconds
        self.calls[label] = self.calls.get(label, 0) + 1

    def wrap(self, owner: Any, attribute: str, label: str | None = None,
             optional: bool = False) -> None:
        """Replace `owner.attribute` by a timed call of itself, counted under `label` (default
        the attribute's name). A missing attribute raises, or is skipped when `optional` (a
        probe of vLLM's parts that some releases lack)."""
        inner: Callable[..., Any] | None = getattr(owner, attribute, None)
        if inner is None:
            if optional:
                return
            raise AttributeError(f"{owner!r} has no {attribute!r} to time")
        key = label or attribute

        @functools.wraps(inner)
        def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return inner(*args, **kwargs)
            finally:
                self.add(key, time.perf_counter() - start)

        setattr(owner, attribute, timed)

    def reset(self) -> None:
        """Forget every count (after a warm-up)."""
        self.seconds.clear()
        self.calls.clear()

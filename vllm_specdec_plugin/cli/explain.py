"""`vllm-specdec explain`: print the plugin's decision as JSON without starting an engine."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from vllm_specdec_plugin.assembly import assemble
from vllm_specdec_plugin.cli.flags import add_decision_flags, split_passthrough
from vllm_specdec_plugin.core.errors import EXIT_INVALID, SpecDecodeConfigError
from vllm_specdec_plugin.core.redact import redact_uri
from vllm_specdec_plugin.core.settings import ENV_INFERENCE_CONFIG, ENV_MODEL, ENV_PRESET_NAME
from vllm_specdec_plugin.core.types import SOURCE_OFF, Annotation, Decision
from vllm_specdec_plugin.inputs.engine_args import parse_vllm_serve
from vllm_specdec_plugin.inputs.inference_config import parse_speculative_config
from vllm_specdec_plugin.inputs.vllm_caps import installed_vllm_build
from vllm_specdec_plugin.platforms import detect_host

EXIT_OK = 0


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
    turned into the request by the same code as the engine hook's (`assembly`).
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
    except SpecDecodeConfigError as exc:  # a flag vLLM's parser must not see (check_argv)
        return Decision(False, SOURCE_OFF, platform=platform, errors=(exc.message,))
    return assemble(engine_args, env, platform, device_name,
                    overrides=overrides).decision


def explain(argv: Sequence[str], environ: Mapping[str, str]) -> int:
    argv, passthrough = split_passthrough(argv)
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
    print(decision.to_json())  # credentials in a URI redacted (the model, as the preset)
    if decision.errors:
        for error in decision.errors:
            print(f"vllm-specdec: {redact_uri(error)}", file=sys.stderr)
        return EXIT_INVALID
    return EXIT_OK

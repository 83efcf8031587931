"""The command-line pieces `vllm-specdec explain` and `vllm-specdec-launch` share."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from vllm_specdec_plugin.core.settings import ENV_INFERENCE_CONFIG, ENV_MODEL, ENV_PRESET_NAME
from vllm_specdec_plugin.platforms import PLATFORMS


def split_passthrough(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """(our flags, the `vllm serve` flags after `--`, untouched)."""
    argv = list(argv)
    if "--" not in argv:
        return argv, []
    cut = argv.index("--")
    return argv[:cut], argv[cut + 1:]


def add_target_flags(parser: argparse.ArgumentParser, model_help: str) -> None:
    """What to serve, where, with which inference config (both commands)."""
    parser.add_argument("--model", help=f"{model_help}; default: env {ENV_MODEL}")
    parser.add_argument("--platform", choices=PLATFORMS, help="default: detected")
    parser.add_argument("--config", metavar="FILE",
                        help=f"KAITO inference_config.yaml; default: env {ENV_INFERENCE_CONFIG}")


def add_decision_flags(parser: argparse.ArgumentParser) -> None:
    """explain's flags for what the launcher reads from env, files and `vllm serve` flags."""
    add_target_flags(parser, "the model (vLLM --model)")
    parser.add_argument("--preset", help=f"the KAITO preset; default: env {ENV_PRESET_NAME}")
    parser.add_argument("--served-model-name", nargs="+", help="vLLM --served-model-name")
    parser.add_argument("--annotation", help="value of kaito.sh/enable-speculative-decoding")
    parser.add_argument("--runtime", help="value of kaito.sh/runtime")
    parser.add_argument("--speculative-config", metavar="JSON",
                        help="the engine's own --speculative-config")
    parser.add_argument("--async-scheduling", action=argparse.BooleanOptionalAction,
                        default=None, help="vLLM --async-scheduling")
    parser.add_argument("--model-impl", help="vLLM --model-impl (default auto)")

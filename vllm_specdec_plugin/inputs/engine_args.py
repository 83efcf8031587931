"""vLLM's engine arguments -> the decision's `EngineRequest`.

The engine hook (on `EngineArgs`), the launcher and `vllm-specdec explain` (both on vLLM's own
`vllm serve` argument parser, `parse_vllm_serve`) build their request here and nowhere else, so
the same arguments always give the same decision (`assembly`).
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from vllm_specdec_plugin.core.errors import SpecDecodeConfigError, quote_value
from vllm_specdec_plugin.core.limits import MAX_CONFIG_BYTES, MAX_DEPTH, decode_text, json_depth
from vllm_specdec_plugin.core.types import EngineRequest
from vllm_specdec_plugin.inputs.files import read_bounded
from vllm_specdec_plugin.inputs.inference_config import parse_speculative_config
from vllm_specdec_plugin.inputs.parsers import load_json, load_yaml

# vLLM's --spec-* flags: (EngineArgs attribute, flag, speculative-config key).
SPEC_FLAGS = (("spec_method", "--spec-method", "method"),
              ("spec_model", "--spec-model", "model"),
              ("spec_tokens", "--spec-tokens", "num_speculative_tokens"))


def speculative_config_of(args: Any) -> dict[str, Any] | None:
    """The engine's own speculative config: --speculative-config merged with --spec-*.

    Keys are normalised (`num-speculative-tokens` -> `num_speculative_tokens`) before any rule
    reads them; a key given both ways gets vLLM's own "mutually exclusive" refusal, up front.
    """
    raw = getattr(args, "speculative_config", None)
    spec = None
    if isinstance(raw, (str, Mapping)):
        spec = parse_speculative_config(dict(raw) if isinstance(raw, Mapping) else raw,
                                        "--speculative-config")
    elif raw is not None:
        spec = dict(raw)  # not a config at all: the plugin's failure policy reports it
    for attr, flag, key in SPEC_FLAGS:
        value = getattr(args, attr, None)
        if value is None:
            continue
        if spec is not None and key in spec:
            raise SpecDecodeConfigError(
                f"{flag} and --speculative-config['{key}'] are mutually exclusive (vLLM "
                f"refuses the pair); keep one of {flag} {quote_value(value)} and "
                f"{key}={quote_value(spec[key])}")
        spec = {**(spec or {}), key: value}
    return spec


def kv_role_of(args: Any) -> str | None:
    """vLLM's kv_transfer_config.kv_role (a KVTransferConfig, a mapping or a JSON string)."""
    config = getattr(args, "kv_transfer_config", None)
    if isinstance(config, str):
        try:
            config = load_json(config, "--kv-transfer-config", "")
        except SpecDecodeConfigError:
            return None  # vLLM reports its own flag's bad JSON
    if isinstance(config, Mapping):
        role = config.get("kv_role", config.get("kv-role"))
    else:
        role = getattr(config, "kv_role", None)
    return str(role) if role is not None else None


def _enum_value(value: Any) -> str | None:
    return None if value is None else str(getattr(value, "value", value))


def engine_request(args: Any) -> EngineRequest:
    """The decision's view of vLLM engine arguments (`EngineArgs` or vLLM's parsed CLI)."""
    names = getattr(args, "served_model_name", None)
    if isinstance(names, str):
        names = [names]
    return EngineRequest(
        model=getattr(args, "model", None),
        served_model_names=tuple(names or ()),
        speculative_config=speculative_config_of(args),
        model_impl=_enum_value(getattr(args, "model_impl", None)),
        async_scheduling=getattr(args, "async_scheduling", None),
        max_num_seqs=getattr(args, "max_num_seqs", None),
        data_parallel_size=getattr(args, "data_parallel_size", 1) or 1,
        pipeline_parallel_size=getattr(args, "pipeline_parallel_size", 1) or 1,
        kv_role=kv_role_of(args),
    )


def vllm_serve_parser() -> argparse.ArgumentParser:
    """vLLM's own `vllm serve` argument parser (ImportError where vLLM is not installed)."""
    from vllm.entrypoints.cli.serve import ServeSubcommand
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = FlexibleArgumentParser(prog="vllm")
    return ServeSubcommand().subparser_init(parser.add_subparsers(dest="subparser"))


def check_argv(argv: Sequence[str]) -> None:
    """Refuse, before vLLM's parser sees them, flag values whose JSON nests deeper than
    `MAX_DEPTH` (vLLM's `json.loads` of a dict-valued flag, `--speculative-config`,
    `--kv-transfer-config`, `--x.y` dotted forms, ... would end in a RecursionError), and a
    vLLM `--config FILE` over the YAML bounds."""
    for number, item in enumerate(argv, start=1):
        if item == "--config" and number < len(argv):
            _check_vllm_config_file(argv[number])
        elif item.startswith("--config="):
            _check_vllm_config_file(item.split("=", 1)[1])
        if "[" not in item and "{" not in item:
            continue
        depth = json_depth(item.split("=", 1)[1] if item.startswith("-") and "=" in item
                           else item)
        if depth > MAX_DEPTH:
            raise SpecDecodeConfigError(
                f"vLLM argument {number} ({quote_value(item, 40)}) is refused: its JSON nests "
                f"{depth} levels deep (at most {MAX_DEPTH}); write the flag's value as a flat "
                "JSON object")


def _check_vllm_config_file(path: str) -> None:
    """vLLM's own `--config FILE` (YAML it turns into flags): read here with the same bounds as
    KAITO's config first, so a hostile file is refused before vLLM's `yaml.safe_load` expands
    it. A file that cannot be read is left to vLLM to report."""
    try:
        data = read_bounded(Path(path), MAX_CONFIG_BYTES)
    except (OSError, ValueError):
        return
    source = f"vLLM --config {quote_value(path)}"
    load_yaml(decode_text(data, source, "write it as UTF-8"), source, "fix the file")


def parse_vllm_serve(model: str | None, argv: Sequence[str],
                     parser: argparse.ArgumentParser | None = None) -> argparse.Namespace:
    """`vllm serve MODEL ARGV` as vLLM parses it (`-tp 2`, `--speculative_config`, ...)."""
    check_argv(argv)
    parser = parser or vllm_serve_parser()
    args = parser.parse_args([model, *argv] if model else list(argv))
    if getattr(args, "model_tag", None):
        args.model = args.model_tag
    return args


def given_flags(argv: Sequence[str], flags: Sequence[str]) -> set[str]:
    """Which of `flags` (long forms) `argv` sets, by any spelling vLLM's parser accepts."""
    check_argv(argv)
    parser = vllm_serve_parser()
    unset = object()
    dests = {}
    for action in parser._actions:
        for flag in flags:
            if flag in action.option_strings:
                dests[action.dest] = flag
                action.default = unset
    parsed = parser.parse_args(["m", *argv])
    return {flag for dest, flag in dests.items() if getattr(parsed, dest, unset) is not unset}

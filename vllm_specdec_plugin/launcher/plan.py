"""The launcher's plan: the `vllm serve` command KAITO would build, with each platform's defaults.

Defaults first, then the inference config's `vllm:` keys as flags, then the caller's flags (the
file and the caller win); the plugin's decision is checked up front through `assembly`.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from vllm_specdec_plugin.assembly import assemble
from vllm_specdec_plugin.core.errors import SpecDecodeConfigError
from vllm_specdec_plugin.core.settings import ENV_INFERENCE_CONFIG, ENV_MODEL
from vllm_specdec_plugin.inputs.annotations import read_opt_in
from vllm_specdec_plugin.inputs.engine_args import given_flags, parse_vllm_serve
from vllm_specdec_plugin.inputs.inference_config import load_inference_config
from vllm_specdec_plugin.inputs.vllm_caps import installed_vllm_build, installed_vllm_has_engine_arg
from vllm_specdec_plugin.platforms import Host, detect_host, get_platform

# SIGTERM drains in-flight requests for this long (vLLM's default, 0, aborts them), inside
# Kubernetes' default 30 s termination grace period.
SHUTDOWN_TIMEOUT_S = 25


@dataclass
class LaunchPlan:
    """What the launcher will run: the dry run prints exactly this."""

    platform: str
    devices: list[str]
    argv: list[str]
    env: dict[str, str | None] = field(default_factory=dict)
    """Variables the launcher sets (None: removes)."""
    decision: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def config_flags(section: Mapping[str, Any]) -> list[str]:
    """KAITO's rule: each key of the `vllm:` section becomes `--key value`."""
    argv: list[str] = []
    for key, value in section.items():
        flag = "--" + str(key).replace("_", "-")
        if value is True or value is None:
            argv.append(flag)
        elif value is False:
            argv.append("--no-" + flag[2:])
        elif isinstance(value, (dict, list)):
            argv += [flag, json.dumps(value, separators=(",", ":"))]
        else:
            argv += [flag, str(value)]
    return argv


def _host_defaults(host: Host, opted_in: bool, root: Path, environ: Mapping[str, str],
                   plan: LaunchPlan) -> list[str]:
    """Per-host flags (only those the user did not give) and env changes, into `plan`."""
    defaults: list[str] = []
    if installed_vllm_has_engine_arg("shutdown_timeout"):
        defaults += ["--shutdown-timeout", str(SHUTDOWN_TIMEOUT_S)]
    platform = get_platform(host.platform).launch_defaults(host, opted_in, root, environ)
    plan.env.update(platform.env)
    plan.notes += platform.notes
    return defaults + platform.flags


def build_plan(args: argparse.Namespace, passthrough: list[str],
               environ: Mapping[str, str]) -> LaunchPlan:
    root = Path(args.root)
    host = detect_host(root, environ, platform=args.platform,
                       vllm_build=installed_vllm_build(environ))
    model = args.model or environ.get(ENV_MODEL)
    if not model:
        raise SpecDecodeConfigError(
            f"no model to serve: pass --model (a Hugging Face repo id or a local checkpoint "
            f"path) or set {ENV_MODEL}")
    env = dict(environ)
    if args.config:
        env[ENV_INFERENCE_CONFIG] = args.config
    config = load_inference_config(env)
    file_flags = config_flags(config.vllm)
    plan = LaunchPlan(host.platform, list(host.devices), [], notes=list(host.notes))
    if args.config:
        plan.env[ENV_INFERENCE_CONFIG] = args.config
    explicit = file_flags + passthrough
    opted_in = read_opt_in(env).opt_in != "off"  # an invalid value too: its error comes below
    defaults = _drop_given(_host_defaults(host, opted_in, root, environ, plan), explicit)
    plan.argv = ["vllm", "serve", model, *defaults, *explicit]
    env = apply_env(env, plan.env)
    # vLLM's own parser reads the command exactly as `vllm serve` will (-tp, _-spellings, ...).
    decision = assemble(parse_vllm_serve(model, plan.argv[3:]), env, host.platform,
                        next(iter(host.device_names), None)).decision
    plan.decision = asdict(decision)
    return plan


def apply_env(environ: Mapping[str, str], changes: Mapping[str, str | None]) -> dict[str, str]:
    """`environ` with the plan's changes (None removes a variable)."""
    env = dict(environ)
    for key, value in changes.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return env


def _drop_given(defaults: list[str], explicit: Sequence[str]) -> list[str]:
    """Defaults come in `--flag value` pairs; drop those the user set themselves (in any
    spelling vLLM's parser accepts: `-tp 2`, `--tensor_parallel_size=2`, ...)."""
    given = given_flags(explicit, defaults[::2]) if defaults else set()
    kept: list[str] = []
    for flag, value in zip(defaults[::2], defaults[1::2], strict=True):
        if flag not in given:
            kept += [flag, value]
    return kept

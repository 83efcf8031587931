"""`vllm-specdec-launch`: one container entrypoint serving on RBLN NPU, NVIDIA GPU and CPU hosts.

Builds the `vllm serve` command the way KAITO does (defaults, then the inference config's `vllm:`
keys as flags, the file winning), adds per-host defaults, checks the plugin's decision up front,
then replaces itself with vLLM (exec) so signals reach vLLM directly as PID 1.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from vllm_specdec_plugin import rbln
from vllm_specdec_plugin.capabilities import installed_vllm_build, installed_vllm_has_engine_arg
from vllm_specdec_plugin.errors import EXIT_INVALID, SpecDecodeConfigError, quote_value
from vllm_specdec_plugin.gather import decide_for_args, given_flags, parse_vllm_serve
from vllm_specdec_plugin.hosts import PLATFORMS, Host, available_memory, detect_host
from vllm_specdec_plugin.inputs import load_inference_config
from vllm_specdec_plugin.redact import redact_argv, redact_env
from vllm_specdec_plugin.resolve import is_opted_in, read_opt_in
from vllm_specdec_plugin.settings import ENV_INFERENCE_CONFIG, ENV_MODEL

# CPU: the KV cache takes this share of available memory (vLLM would reserve 92% of RAM).
CPU_KV_CACHE_SHARE = 0.25
CPU_KV_CACHE_MIN = 512 << 20
CPU_KV_CACHE_MAX = 16 << 30
CPU_KV_CACHE_DEFAULT = 2 << 30  # neither /proc/meminfo nor a cgroup limit readable
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


def _cpu_kv_cache_bytes(root: Path, plan: LaunchPlan) -> int:
    """A share of what this container may use: the node's memory or the pod's cgroup limit."""
    memory = available_memory(root)
    if memory.available is None:
        size = CPU_KV_CACHE_DEFAULT
    else:
        size = int(memory.available * CPU_KV_CACHE_SHARE)
        size = max(CPU_KV_CACHE_MIN, min(CPU_KV_CACHE_MAX, size)) // (1 << 20) * (1 << 20)
    plan.notes.append(f"--kv-cache-memory-bytes {size} ({size >> 20} MiB): "
                      f"{CPU_KV_CACHE_SHARE:.0%} of {memory.source}, between "
                      f"{CPU_KV_CACHE_MIN >> 20} MiB and {CPU_KV_CACHE_MAX >> 30} GiB")
    return size


def _host_defaults(host: Host, opted_in: bool, root: Path, environ: Mapping[str, str],
                   plan: LaunchPlan) -> list[str]:
    """Per-host flags (only those the user did not give) and env changes, into `plan`."""
    defaults: list[str] = []
    if installed_vllm_has_engine_arg("shutdown_timeout"):
        defaults += ["--shutdown-timeout", str(SHUTDOWN_TIMEOUT_S)]
    if host.platform == "cuda" and host.devices:
        defaults += ["--tensor-parallel-size", str(len(host.devices))]
    elif host.platform == "rbln":
        if environ.get(rbln.LEGACY_DEVICES_ENV) and not environ.get(rbln.DEVICES_ENV):
            plan.env[rbln.DEVICES_ENV] = environ[rbln.LEGACY_DEVICES_ENV]
        if rbln.LEGACY_DEVICES_ENV in environ:
            plan.env[rbln.LEGACY_DEVICES_ENV] = None
            plan.notes.append(f"{rbln.LEGACY_DEVICES_ENV} (deprecated) folded into "
                              f"{rbln.DEVICES_ENV}")
        if opted_in:
            defaults += ["--model-impl", "vllm"]
            if rbln.LEGACY_MODEL_ENV in environ:
                plan.env[rbln.LEGACY_MODEL_ENV] = None
                plan.notes.append(f"{rbln.LEGACY_MODEL_ENV} (deprecated) removed: "
                                  "--model-impl vllm decides the model path")
    elif host.platform == "cpu":
        defaults += ["--kv-cache-memory-bytes", str(_cpu_kv_cache_bytes(root, plan))]
        iomp = Path(sys.prefix) / "lib" / "libiomp5.so"
        if iomp.exists() and "LD_PRELOAD" not in environ:
            # vLLM's CPU worker: speculative decoding without Intel OpenMP preloaded is slow.
            plan.env["LD_PRELOAD"] = str(iomp)
    return defaults


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
    opted_in = is_opted_in(read_opt_in(env))  # an invalid value too: its error comes below
    defaults = _drop_given(_host_defaults(host, opted_in, root, environ, plan), explicit)
    plan.argv = ["vllm", "serve", model, *defaults, *explicit]
    env = apply_env(env, plan.env)
    # vLLM's own parser reads the command exactly as `vllm serve` will (-tp, _-spellings, ...).
    decision = decide_for_args(parse_vllm_serve(model, plan.argv[3:]), env, host.platform,
                               next(iter(host.device_names), None))
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


def parse_args(argv: Sequence[str]) -> tuple[argparse.Namespace, list[str]]:
    argv = list(argv)
    passthrough: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, passthrough = argv[:cut], argv[cut + 1:]
    parser = argparse.ArgumentParser(
        prog="vllm-specdec-launch",
        description="Serve a model with vLLM on RBLN NPU, NVIDIA GPU or CPU hosts, with the "
                    "speculative-decoding plugin's decision checked up front. Arguments after "
                    "`--` go to `vllm serve` untouched.")
    parser.add_argument("--model", help=f"model to serve; default: env {ENV_MODEL}")
    parser.add_argument("--platform", choices=PLATFORMS, help="default: detected")
    parser.add_argument("--config", metavar="FILE",
                        help=f"KAITO inference_config.yaml; default: env {ENV_INFERENCE_CONFIG}")
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
        shown = {**asdict(plan), "env": redact_env(plan.env), "argv": redact_argv(plan.argv)}
        print(json.dumps(shown, indent=2))
    for error in errors:
        print(f"vllm-specdec-launch: {error}", file=sys.stderr)
    if errors:
        return EXIT_INVALID
    if args.dry_run:
        return 0
    return _exec(plan, environ)


def _exec(plan: LaunchPlan, environ: Mapping[str, str]) -> int:
    env = apply_env(environ, plan.env)
    for note in plan.notes:
        print(f"vllm-specdec-launch: {note}", file=sys.stderr)
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


if __name__ == "__main__":
    sys.exit(main())

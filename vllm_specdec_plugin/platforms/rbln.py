"""RBLN NPUs (vllm-rbln 0.12): detection, launch defaults, capabilities and refusals.

Every piece of RBLN knowledge lives here, the way vllm-rbln keeps its policy in `RblnPlatform`.
Each rule mirrors a check in vllm-rbln's own code; tests/compat/test_rbln.py runs that code to
prove it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from vllm_specdec_plugin.core.errors import SpecDecodeConfigError, quote_value
from vllm_specdec_plugin.core.methods import methods_where
from vllm_specdec_plugin.core.types import EngineRequest, PlatformCapabilities
from vllm_specdec_plugin.platforms.base import (
    Host,
    HostFacts,
    LaunchDefaults,
    Platform,
    numbered,
    parse_device_list,
    run_tool,
)

# The proposers vllm-rbln's model runner accepts (rbln_model_runner.py: anything else raises
# "Unsupported speculative decoding method"): the `on_rbln` rows of core.methods.
RBLN_METHODS = methods_where("on_rbln")
# The rejection sampler's maximum speculative length with the on-NPU sampler
# (rbln_rejection_sampler.py: max_spec_len = 32); the upstream sampler takes 128.
RBLN_MAX_SPECULATIVE_TOKENS = 32
RBLN_MAX_SPECULATIVE_TOKENS_UPSTREAM_SAMPLER = 128
RBLN_MODEL_PATH_REASON = ("speculative decoding runs on the vLLM model implementation only "
                          "(RBLN's optimum path refuses it)")
# ATOM devices run the optimum path only.
ATOM_PREFIX = "RBLN-CA"
LEGACY_MODEL_ENV = "VLLM_RBLN_USE_VLLM_MODEL"
LEGACY_DEVICES_ENV = "RBLN_DEVICES"
DEVICES_ENV = "RBLN_VISIBLE_DEVICES"
# Names the NPU on hosts that only compile (no device visible).
FORCE_NPU_NAME_ENV = "RBLN_FORCE_NPU_NAME"
RBLN_TOOLS = ("rbln-smi", "rbln-stat")
RBLN_NAME = re.compile(r"\bRBLN-[A-Z]{1,4}\d+[A-Z0-9]*\b")
_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off", "")


def is_atom(device_name: str | None) -> bool:
    return bool(device_name) and str(device_name).strip().upper().startswith(ATOM_PREFIX)


def atom_refusal(device_name: str) -> str:
    return (
        f"speculative decoding cannot run on RBLN ATOM NPUs ({device_name}): they run only the "
        "optimum model path (--model-impl optimum), which refuses speculative decoding; set "
        "kaito.sh/enable-speculative-decoding: \"false\" or schedule the workload on "
        "RBLN-CR/REBEL NPUs"
    )


def legacy_model_env_conflict(value: str | None) -> str | None:
    """The error to give when the legacy variable's `value` asks for the optimum path."""
    if value is None or value.strip().lower() in _TRUE:
        return None
    shown = quote_value(value)
    if value.strip().lower() in _FALSE:
        return (f"{LEGACY_MODEL_ENV}={shown} selects RBLN's optimum model path, which refuses "
                f"speculative decoding; unset {LEGACY_MODEL_ENV} (deprecated) or set it to 1")
    return f"{LEGACY_MODEL_ENV}={shown} is not a boolean; unset it (deprecated) or set it to 1"


def detect_rbln(root: Path, environ: Mapping[str, str], path_env: str | None) -> Host | None:
    evidence: list[str] = []
    names: list[str] = []
    devices = numbered(root / "dev", "rbln")
    if devices:
        evidence.append(f"{root / 'dev'}/rbln{{{','.join(devices)}}}")
    sys_devices = numbered(root / "sys/class/rebellions", "rbln")
    if sys_devices:
        evidence.append(f"{root / 'sys/class/rebellions'} ({len(sys_devices)} devices)")
        devices = devices or sys_devices
    for tool in RBLN_TOOLS:
        output = run_tool(tool, [], path_env)
        if output is not None:
            names = RBLN_NAME.findall(output)
            evidence.append(f"{tool} on PATH ({len(names)} NPUs listed)")
            break
    if environ.get(FORCE_NPU_NAME_ENV):
        names = names or [environ[FORCE_NPU_NAME_ENV]]
        evidence.append(FORCE_NPU_NAME_ENV)
    visible_env = next((n for n in (DEVICES_ENV, LEGACY_DEVICES_ENV)
                        if environ.get(n)), None)
    if visible_env:
        evidence.append(visible_env)
    if not evidence:
        return None
    if not devices and names:
        devices = [str(i) for i in range(len(names))]
    if visible_env:
        visible = parse_device_list(environ[visible_env], visible_env)
        missing = [d for d in visible if devices and d not in devices]
        if missing:
            raise SpecDecodeConfigError(
                f"{visible_env}={quote_value(environ[visible_env])} names NPUs "
                f"{','.join(missing)} that this host does not have (found: "
                f"{','.join(devices) or 'none'}); list only present devices"
            )
        devices = list(visible)
    return Host("rbln", tuple(devices), tuple(names), tuple(evidence))


def upstream_sampler(args: Any) -> bool:
    """vllm-rbln's `--no-rbln-use-custom-sampler` (additional_config.use_custom_sampler)."""
    config = getattr(args, "additional_config", None)
    value = (config.get("use_custom_sampler") if isinstance(config, Mapping)
             else getattr(config, "use_custom_sampler", None))
    return value is False


class RblnPlatform(Platform):
    name = "rbln"
    devices_label = "RBLN NPU"

    def detect(self, facts: HostFacts) -> Host | None:
        return detect_rbln(facts.root, facts.environ, facts.path_env)

    def adjust(self, caps: PlatformCapabilities, args: Any) -> PlatformCapabilities:
        """vllm-rbln's proposers only, synchronous scheduling, its sampler's token cap, and the
        vLLM model path (on `auto` vllm-rbln may pick optimum, which refuses speculation)."""
        return replace(caps, methods=caps.methods & RBLN_METHODS, async_methods=frozenset(),
                       max_num_speculative_tokens=(
                           RBLN_MAX_SPECULATIVE_TOKENS_UPSTREAM_SAMPLER
                           if upstream_sampler(args) else RBLN_MAX_SPECULATIVE_TOKENS),
                       vllm_model_impl_only=RBLN_MODEL_PATH_REASON)

    def refusals(self, engine: EngineRequest, environ: Mapping[str, str],
                 device_name: str | None) -> tuple[str, ...]:
        if is_atom(device_name):
            return (atom_refusal(device_name or ""),)
        conflict = legacy_model_env_conflict(environ.get(LEGACY_MODEL_ENV))
        return (conflict,) if conflict else ()

    def launch_defaults(self, host: Host, opted_in: bool, root: Path,
                        environ: Mapping[str, str]) -> LaunchDefaults:
        """The legacy device variable folded in; opted in, the vllm model path (the optimum
        path refuses speculative decoding) and the legacy model-path variable dropped."""
        defaults = LaunchDefaults()
        if environ.get(LEGACY_DEVICES_ENV) and not environ.get(DEVICES_ENV):
            defaults.env[DEVICES_ENV] = environ[LEGACY_DEVICES_ENV]
        if LEGACY_DEVICES_ENV in environ:
            defaults.env[LEGACY_DEVICES_ENV] = None
            defaults.notes.append(f"{LEGACY_DEVICES_ENV} (deprecated) folded into {DEVICES_ENV}")
        if opted_in:
            defaults.flags += ["--model-impl", "vllm"]
            if LEGACY_MODEL_ENV in environ:
                defaults.env[LEGACY_MODEL_ENV] = None
                defaults.notes.append(f"{LEGACY_MODEL_ENV} (deprecated) removed: "
                                      "--model-impl vllm decides the model path")
        return defaults

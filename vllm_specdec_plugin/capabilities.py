"""What the installed vLLM can run: read from vLLM's own types, not from its version string."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterable
from typing import Any, get_args

from vllm_specdec_plugin.decision import PlatformCapabilities
from vllm_specdec_plugin.rbln import (
    RBLN_MAX_SPECULATIVE_TOKENS,
    RBLN_MAX_SPECULATIVE_TOKENS_UPSTREAM_SAMPLER,
    RBLN_METHODS,
)

# Used only where vLLM cannot be imported (the explain CLI on a machine without it).
_FALLBACK_METHODS = frozenset(
    {"ngram", "suffix", "eagle", "eagle3", "medusa", "mtp", "draft_model", "mlp_speculator"}
)
_FALLBACK_ASYNC_METHODS = frozenset({"eagle", "eagle3", "mtp", "draft_model"})
# Methods vLLM's VllmConfig accepts with async scheduling besides the EAGLE/MTP family
# (vllm/config/vllm.py names them as strings, not as a Literal type).
_ASYNC_EXTRA_METHODS = frozenset({"draft_model", "dspark", "dflash"})


def _flatten_literal(tp: Any) -> set[str]:
    values: set[str] = set()
    for arg in get_args(tp):
        if isinstance(arg, str):
            values.add(arg)
        else:
            values |= _flatten_literal(arg)
    return values


def installed_vllm_methods() -> tuple[str | None, frozenset[str], frozenset[str]]:
    """(vLLM version, its speculative methods, the ones it runs with async scheduling)."""
    try:
        import vllm
        from vllm.config import speculative
    except ImportError:
        return None, _FALLBACK_METHODS, _FALLBACK_ASYNC_METHODS
    methods = frozenset(_flatten_literal(speculative.SpeculativeMethod))
    async_methods = _flatten_literal(getattr(speculative, "EagleModelTypes", None))
    async_methods |= _flatten_literal(getattr(speculative, "NgramGPUTypes", None))
    async_methods |= _ASYNC_EXTRA_METHODS & methods
    return getattr(vllm, "__version__", None), methods, frozenset(async_methods)


def installed_vllm_has_batch_schedule() -> bool:
    """Whether SpeculativeConfig has `num_speculative_tokens_per_batch_size`."""
    try:
        from vllm.config.speculative import SpeculativeConfig
    except ImportError:
        return False
    fields = getattr(SpeculativeConfig, "__dataclass_fields__", {})
    return "num_speculative_tokens_per_batch_size" in fields


def current_vllm_platform() -> str:
    """The platform vLLM itself resolved: "rbln", "cuda", "cpu" or its device type."""
    from vllm.platforms import current_platform

    # RblnPlatform keeps device_type "cpu" as a placeholder, so it is told apart by its plugin.
    if getattr(current_platform, "plugin_name", None) == "rbln" or type(
        current_platform
    ).__module__.startswith("vllm_rbln"):
        return "rbln"
    if current_platform.is_cuda():
        return "cuda"
    if current_platform.is_cpu():
        return "cpu"
    return str(current_platform.device_type)


def capabilities_for(
    platform: str,
    *,
    device_name: str | None = None,
    rbln_upstream_sampler: bool = False,
    vllm_info: tuple[str | None, Iterable[str], Iterable[str]] | None = None,
) -> PlatformCapabilities:
    """The capabilities of `platform` with the installed vLLM (or the given `vllm_info`)."""
    version, methods, async_methods = vllm_info or installed_vllm_methods()
    batch_schedule = vllm_info is None and installed_vllm_has_batch_schedule()
    methods, async_methods = frozenset(methods), frozenset(async_methods)
    max_tokens = None
    if platform == "rbln":
        methods &= RBLN_METHODS
        async_methods = frozenset()  # vllm-rbln runs speculative decoding synchronously
        max_tokens = (
            RBLN_MAX_SPECULATIVE_TOKENS_UPSTREAM_SAMPLER
            if rbln_upstream_sampler
            else RBLN_MAX_SPECULATIVE_TOKENS
        )
    return PlatformCapabilities(
        platform=platform,
        vllm_version=version,
        methods=methods,
        async_methods=async_methods,
        max_num_speculative_tokens=max_tokens,
        suffix_available=importlib.util.find_spec("arctic_inference") is not None,
        device_name=device_name,
        batch_schedule=batch_schedule,
    )

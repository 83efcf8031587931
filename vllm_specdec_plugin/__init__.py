"""vllm-specdec-plugin: one KAITO annotation turns on the right speculative decoding in vLLM."""

from __future__ import annotations

__version__ = "0.1.0"


def register() -> None:
    """The `vllm.general_plugins` entry point, called once in every vLLM process.

    Kept cheap and idempotent: it wraps `EngineArgs.create_engine_config` (all reading and
    deciding happens when an engine is actually configured) and, when opted in, applies the
    other changes to vLLM in this process (bug fixes where their bug shows, shortcuts). Every
    change to vLLM lives in `engine/` (the registry: `engine/registry.py`).
    """
    from vllm_specdec_plugin.engine import registry
    from vllm_specdec_plugin.engine.hook import opted_in_quietly

    registry.register_changes(opted_in_quietly())

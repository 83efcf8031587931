"""vllm-specdec-plugin: one KAITO annotation turns on the right speculative decoding in vLLM."""

from __future__ import annotations

__version__ = "0.1.0"


def register() -> None:
    """The `vllm.general_plugins` entry point, called once in every vLLM process.

    Kept cheap and idempotent: it wraps `EngineArgs.create_engine_config` (all reading and
    deciding happens when an engine is actually configured) and, when opted in, fixes the vLLM
    bugs speculative decoding would hit in this process. Every change to vLLM lives in
    `engine/` (the registry: `engine/fixes.py`).
    """
    from vllm_specdec_plugin.engine import fixes, patching
    from vllm_specdec_plugin.engine.hook import install, opted_in_quietly

    opted_in = opted_in_quietly()
    if opted_in:
        patching.warn_if_untested_vllm()
    install(announce=opted_in)
    if opted_in:
        fixes.apply_fixes()

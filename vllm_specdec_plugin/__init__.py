"""vllm-specdec-plugin: one KAITO annotation turns on the right speculative decoding in vLLM."""

from __future__ import annotations

__version__ = "0.1.0"


def register() -> None:
    """The `vllm.general_plugins` entry point, called once in every vLLM process.

    Kept cheap and idempotent: it wraps `EngineArgs.create_engine_config` (all reading and
    deciding happens when an engine is actually configured) and, when opted in, fixes the vLLM
    bugs speculative decoding would hit in this process (`vllm_fixes`).
    """
    from vllm_specdec_plugin.hook import install, opted_in_quietly

    install()
    if opted_in_quietly():
        from vllm_specdec_plugin.vllm_fixes import apply_fixes

        apply_fixes()

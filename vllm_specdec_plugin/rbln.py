"""RBLN NPU rules (vllm-rbln 0.12), in one place for the decision and the launcher.

Each rule mirrors a check in vllm-rbln's own code; tests/test_rbln.py runs that code to prove it.
"""

from __future__ import annotations

from vllm_specdec_plugin.errors import quote_value

# The proposers vllm-rbln's model runner accepts (rbln_model_runner.py: anything else raises
# "Unsupported speculative decoding method").
RBLN_METHODS = frozenset({"ngram", "suffix", "eagle", "eagle3", "medusa", "mtp", "dflash"})
# The rejection sampler's maximum speculative length with the on-NPU sampler
# (rbln_rejection_sampler.py: max_spec_len = 32); the upstream sampler takes 128.
RBLN_MAX_SPECULATIVE_TOKENS = 32
RBLN_MAX_SPECULATIVE_TOKENS_UPSTREAM_SAMPLER = 128
# ATOM devices run the optimum path only.
ATOM_PREFIX = "RBLN-CA"
LEGACY_MODEL_ENV = "VLLM_RBLN_USE_VLLM_MODEL"
LEGACY_DEVICES_ENV = "RBLN_DEVICES"
DEVICES_ENV = "RBLN_VISIBLE_DEVICES"
# Names the NPU on hosts that only compile (no device visible).
FORCE_NPU_NAME_ENV = "RBLN_FORCE_NPU_NAME"
_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off", "")


def is_atom(device_name: str | None) -> bool:
    return bool(device_name) and device_name.strip().upper().startswith(ATOM_PREFIX)


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

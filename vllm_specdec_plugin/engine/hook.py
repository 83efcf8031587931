"""The engine hook: applies the decision to `EngineArgs` before vLLM builds its `VllmConfig`.

`EngineArgs.create_engine_config()` is the one call `vllm serve`, `LLM()` and `AsyncLLM` all make
before the config exists; the `engine-config-hook` change (`engine/changes/engine_arg_utils.py`)
wraps it so that `apply_to_engine_args` runs first and `export_decision` once vLLM built the
config. Opted in, one INFO line says the decision and the changes to vLLM applied in this
process (`registry.applied()`, each with its kind: the registry hands that list over through
`set_changes_summary`, since its first row installs this hook and the hook cannot import it).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from vllm_specdec_plugin.assembly import assemble
from vllm_specdec_plugin.core.errors import SpecDecodeConfigError
from vllm_specdec_plugin.core.redact import redact_uri
from vllm_specdec_plugin.core.settings import ENV_ON_ERROR, ON_ERROR_CHOICES, setting_value
from vllm_specdec_plugin.core.types import Decision, EngineRequest
from vllm_specdec_plugin.engine import metrics, patching, schedule_report
from vllm_specdec_plugin.engine.changes import core_sched_scheduler
from vllm_specdec_plugin.engine.patching import logger
from vllm_specdec_plugin.inputs.annotations import read_opt_in
from vllm_specdec_plugin.inputs.engine_args import SPEC_FLAGS
from vllm_specdec_plugin.inputs.vllm_caps import current_vllm_platform

_APPLIED = "_specdec_plugin_decision"
_SERVED_WITHOUT = "_specdec_plugin_served_without"
_SCHEDULE_REPORT = "_specdec_plugin_schedule_report"
PER_REQUEST_METRICS = "per_request_spec_decode_metrics"


_changes_summary: list[Callable[[], str]] = []


def set_changes_summary(summary: Callable[[], str]) -> None:
    """`engine/registry.py`'s "name (kind), name (kind, armed), ..." of this process's changes."""
    _changes_summary[:] = [summary]


def opted_in_quietly() -> bool:
    """Whether the opt-in is exactly "true"; bad input is left for the engine start to report."""
    try:
        return read_opt_in(os.environ).opt_in == "on"
    except SpecDecodeConfigError:
        return False


def apply_to_engine_args(args: Any) -> Decision | None:
    """Decide for these engine arguments and apply the decision to them (once per object)."""
    previous: Decision | None = getattr(args, _APPLIED, None)
    if previous is not None:
        return previous
    environ = os.environ
    try:
        annotation = read_opt_in(environ)
        if annotation.opt_in == "off":
            logger.debug("speculative decoding not opted in (%s)", annotation.source)
            return None
        platform = current_vllm_platform()
        assembled = assemble(args, environ, platform,
                             _device_name() if platform == "rbln" else None,
                             annotation=annotation)
        request, decision = assembled.request, assembled.decision
        if decision.enabled is False and decision.notes and not decision.errors:
            logger.info("%s", decision.summary())  # e.g. a prefill-only instance
            setattr(args, _APPLIED, decision)
            return decision
    except SpecDecodeConfigError as exc:
        logger.error("%s", exc.message)
        raise
    except Exception as exc:
        _plugin_failed(exc)  # raises unless the policy is serve-without
        setattr(args, _SERVED_WITHOUT, True)
        return None
    if decision.errors or request is None:
        message = redact_uri("; ".join(decision.errors))
        logger.error("%s", message)
        raise SpecDecodeConfigError(message)
    try:
        _apply(args, request, decision)
    except SpecDecodeConfigError as exc:  # e.g. VLLM_SPECDEC_SWITCHBACK naming an unknown arm
        logger.error("%s", exc.message)
        raise
    setattr(args, _APPLIED, decision)
    changes = _changes_summary[0]() if _changes_summary else ""
    changes_note = f"; changes to vLLM: {changes}" if changes else ""
    per_request = _ask_per_request_metrics(args)
    logger.info("%s%s%s", decision.summary(), per_request, changes_note)
    for warning in decision.warnings:
        logger.warning("speculative decoding: %s", redact_uri(warning))
    for patched in patching.replaced_after_us():
        logger.warning("vllm-specdec-plugin: a patch of the plugin was replaced after it was "
                       "applied: %s; that code decides whether the plugin's change still runs",
                       patched)
    return decision


def _device_name() -> str | None:
    from vllm.platforms import current_platform

    try:
        return current_platform.get_device_name()
    except Exception as exc:  # no NPU visible (e.g. a compile-only host): no ATOM check
        logger.debug("RBLN device name unknown: %s", exc)
        return None


def _apply(args: Any, requested: EngineRequest, decision: Decision) -> None:
    if (decision.speculative_config is not None
            and decision.speculative_config != requested.speculative_config):
        args.speculative_config = dict(decision.speculative_config or {})
        for attr, _, _ in SPEC_FLAGS:
            if getattr(args, attr, None) is not None:
                setattr(args, attr, None)
    if decision.model_impl != requested.model_impl:  # else vLLM resolves the user's own value
        args.model_impl = decision.model_impl
    if decision.async_scheduling is False:
        args.async_scheduling = False
    setattr(args, _SCHEDULE_REPORT, core_sched_scheduler.configure(decision))


def _ask_per_request_metrics(args: Any) -> str:
    """Each response carries its own acceptance, where vLLM has the option (>= 0.32).

    Only a value left at vLLM's default ("none") changes; it is said in the INFO line.
    """
    if getattr(args, PER_REQUEST_METRICS, None) != "none":
        return ""
    setattr(args, PER_REQUEST_METRICS, "summary")
    return f"; {PER_REQUEST_METRICS}=summary (each response carries its acceptance)"


def export_decision(args: Any, vllm_config: Any) -> None:
    """After vLLM built its config: opted in, the decision and what vLLM resolved from it go
    to /metrics (`metrics.py`); not opted in, nothing."""
    decision = getattr(args, _APPLIED, None)
    if decision is None and not getattr(args, _SERVED_WITHOUT, False):
        return  # not opted in: nothing exported
    try:
        labels = metrics.decision_labels(decision, *metrics.resolved_speculation(vllm_config),
                                         model_name=metrics.served_model_name(vllm_config))
        metrics.export_decision(labels)
        report = getattr(args, _SCHEDULE_REPORT, None)
        if report:
            schedule_report.export(report)
    except Exception as exc:  # observability must not stop an engine that is configured
        logger.warning("speculative decoding: decision not exported to /metrics (%s: %s)",
                       type(exc).__name__, redact_uri(str(exc)))


def _plugin_failed(exc: Exception) -> None:
    policy = setting_value(os.environ, ENV_ON_ERROR)
    cause = redact_uri(f"{type(exc).__name__}: {exc}")
    if policy == "serve-without":
        logger.warning(
            "vllm-specdec-plugin failed (%s); serving WITHOUT speculative decoding because "
            "%s=serve-without", cause, ENV_ON_ERROR)
        return None
    bad_policy = "" if policy in ON_ERROR_CHOICES else (
        f" ({ENV_ON_ERROR}={policy!r} is not one of {', '.join(ON_ERROR_CHOICES)})")
    raise SpecDecodeConfigError(
        f"the plugin failed while choosing the speculative config ({cause}); the engine does "
        f"not start{bad_policy}. Set {ENV_ON_ERROR}=serve-without to serve without speculation "
        "instead"
    ) from exc

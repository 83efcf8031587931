"""The decision in `/metrics`: gauge `vllm_specdec_decision_info` (value 1, the choice as labels).

Exported through vLLM's own Prometheus registry the way vLLM 0.32 exports
`vllm:cache_config_info` (`vllm/v1/metrics/loggers.py`): a gauge set to 1, created in the default
registry with `multiprocess_mode="mostrecent"`. `vllm serve` creates the engine config in every
API-server process (`build_async_engine_client_from_engine_args`), so each of them exports it.
With one API server `/metrics` serves the default registry; with several
(`--api-server-count` > 1) vLLM sets `PROMETHEUS_MULTIPROC_DIR` before spawning them, the gauge's
value goes to that directory, and `/metrics` collects it from there (mode "mostrecent": one
sample, not one per process).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from vllm_specdec_plugin.core.redact import redact_uri
from vllm_specdec_plugin.core.types import DECISION_METRIC, METHOD_NONE, Decision

LABELS = ("model_name", "method", "source", "num_speculative_tokens", "preset", "platform",
          "schedule")
SOURCE_SERVED_WITHOUT = "plugin-failed (serve-without)"

_gauge: Any = None


def decision_labels(decision: Decision | None, method: str | None, num_tokens: int | None,
                    schedule: bool, model_name: str = "") -> dict[str, str]:
    """The gauge's labels: what the engine runs (vLLM's resolved config) and why (the decision).

    `decision` is None when the plugin failed and serves without speculation; `method` is None
    when vLLM runs without a speculative config. Credentials in a URI (the model, which vLLM
    serves under its own name unless `--served-model-name` says otherwise, and the preset, the
    model's name where no preset matched) are redacted.
    """
    labels = {
        "model_name": model_name,
        "method": method or METHOD_NONE,
        "source": decision.source if decision is not None else SOURCE_SERVED_WITHOUT,
        "num_speculative_tokens": str(num_tokens or 0),
        "preset": (decision.preset if decision is not None else None) or "",
        "platform": (decision.platform if decision is not None else None) or "",
        # "controller": the plugin's schedule, learned per batch bucket (core/schedule_control)
        "schedule": ("controller" if decision is not None and decision.schedule_control
                     else "on") if method and schedule else "off",
    }
    return {name: redact_uri(value) for name, value in labels.items()}


def resolved_speculation(vllm_config: Any) -> tuple[str | None, int | None, bool]:
    """(method, num_speculative_tokens, has a per-batch-size schedule) of a `VllmConfig`."""
    spec = getattr(vllm_config, "speculative_config", None)
    if spec is None:
        return None, None, False
    schedule = getattr(spec, "num_speculative_tokens_per_batch_size", None)
    return spec.method, spec.num_speculative_tokens, bool(schedule)


def served_model_name(vllm_config: Any) -> str:
    """The name vLLM serves the model under (its own `model_name` label on /metrics)."""
    model_config = getattr(vllm_config, "model_config", None)
    name = getattr(model_config, "served_model_name", None) or getattr(model_config, "model", "")
    if isinstance(name, (list, tuple)):
        name = name[0] if name else ""
    return str(name or "")


def export_decision(labels: Mapping[str, str]) -> None:
    """Set the gauge in this process's Prometheus registry (created once per process)."""
    global _gauge
    from prometheus_client import Gauge

    if _gauge is None:
        _gauge = Gauge(DECISION_METRIC,
                       "Speculative decoding chosen by vllm-specdec-plugin (value 1; labels)",
                       labelnames=LABELS, multiprocess_mode="mostrecent")
    _gauge.clear()  # one engine config per process: the latest decision is the one running
    _gauge.labels(**labels).set(1)

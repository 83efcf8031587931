"""The decision's typed inputs and its result: frozen dataclasses, no I/O.

The adapters (`inputs/`, `platforms/`) build these from env, files, the host and vLLM's own
types; `core.decide.decide` maps them to a `Decision`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any, Literal

from vllm_specdec_plugin.core.redact import redact_strings, redact_uri
from vllm_specdec_plugin.core.settings import Fallback

# Why the config is what it is (`Decision.source`); a Literal so a type checker sees a typo.
Source = Literal["off", "user-config (engine arguments)", "user-config (inference_config.yaml)",
                 "tuned-preset", "ngram-fallback", "suffix-fallback", "adaptive-fallback",
                 "speculators-checkpoint", "checkpoint-mtp", "draft-model", "prefill-only"]
SOURCE_OFF: Source = "off"
SOURCE_USER_ENGINE: Source = "user-config (engine arguments)"
SOURCE_USER_FILE: Source = "user-config (inference_config.yaml)"
SOURCE_TUNED: Source = "tuned-preset"
SOURCE_SPECULATORS: Source = "speculators-checkpoint"
SOURCE_CHECKPOINT_MTP: Source = "checkpoint-mtp"
SOURCE_DRAFT: Source = "draft-model"
SOURCE_PREFILL_ONLY: Source = "prefill-only"
USER_SOURCES: tuple[Source, ...] = (SOURCE_USER_ENGINE, SOURCE_USER_FILE)

KV_PRODUCER = "kv_producer"
"""vLLM's kv_transfer_config.kv_role of a prefill-only (disaggregated) instance."""

# The decision in /metrics (engine/metrics.py exports it, inputs/vllm_metrics.py reads it).
DECISION_METRIC = "vllm_specdec_decision_info"
METHOD_NONE = "none"

OptIn = Literal["on", "off", "invalid"]


@dataclass(frozen=True)
class Annotation:
    """One annotation value and where it was read (for messages)."""

    value: str | None
    source: str

    @property
    def opt_in(self) -> OptIn:
        """KAITO's rule: exactly "true" opts in, absent or "false" does not, anything else is
        invalid (and gets its error from the decision)."""
        if self.value is None or self.value == "false":
            return "off"
        return "on" if self.value == "true" else "invalid"


@dataclass(frozen=True)
class CheckpointInfo:
    """The facts the decision needs from one checkpoint's config.json."""

    path: str
    speculators: bool = False
    mtp_layers: int = 0
    draft_method: str | None = None
    vocab_size: int | None = None
    hidden_size: int | None = None
    num_heads: int | None = None
    """Medusa heads (the most tokens a Medusa draft proposes)."""
    speculators_method: str | None = None
    """The vLLM method of a speculators-format checkpoint, as vLLM reads it."""
    speculators_tokens: int | None = None
    """Its `speculative_tokens` (vLLM's num_speculative_tokens)."""
    architectures: tuple[str, ...] = ()


@dataclass(frozen=True)
class PlatformCapabilities:
    """What the installed vLLM on this platform can run (built once per engine start by
    `assembly`: vLLM's own types read by `inputs.vllm_caps`, then the platform's overrides)."""

    platform: str
    """"cuda", "rbln", "cpu", or another vLLM device name."""
    vllm_version: str | None
    methods: frozenset[str]
    """Speculative methods the installed vLLM (and, on RBLN, vllm-rbln) accepts."""
    async_methods: frozenset[str]
    """Methods that run with async scheduling on this platform (empty: none do)."""
    pipeline_refusals: Mapping[str, str] = field(default_factory=dict)
    """Per method: why the installed vLLM refuses it with pipeline parallelism."""
    max_num_speculative_tokens: int | None = None
    """The platform's cap on num_speculative_tokens (RBLN's sampler), None for no cap."""
    suffix_available: bool = False
    """Whether `arctic_inference`, which the suffix method needs, is importable."""
    device_name: str | None = None
    """The accelerator's model name where known (RBLN ATOM NPUs refuse the vllm path)."""
    batch_schedule: bool = False
    """Whether vLLM has `num_speculative_tokens_per_batch_size` (a load-aware schedule)."""
    v2_methods: frozenset[str] = frozenset()
    """Methods the installed vLLM runs on Model Runner V2 on this platform."""
    static_schedule: Mapping[str, str] = field(default_factory=dict)
    """Per method: why vLLM here would drop the schedule, downgrade CUDA graphs or fail."""
    refusals: tuple[str, ...] = ()
    """Why speculative decoding cannot run on this platform at all, as the platform's module
    found it (an RBLN ATOM NPU, vllm-rbln's legacy model-path variable); each one an error."""
    vllm_model_impl_only: str | None = None
    """Why this platform runs speculative decoding on vLLM's own model implementation only
    (`model_impl` becomes "vllm" whatever the target: RBLN's optimum path refuses it)."""
    vllm_serves_target: bool | None = None
    """Whether the installed vLLM's model registry lists the target's architecture (from its
    config.json), so `model_impl` "vllm" serves it; False: only vLLM's Transformers backend can,
    on "auto"; None: not known (no local checkpoint, or vLLM not importable)."""


@dataclass(frozen=True)
class EngineRequest:
    """What the engine itself was asked for (vLLM's own flags)."""

    model: str | None = None
    served_model_names: tuple[str, ...] = ()
    speculative_config: Mapping[str, Any] | None = None
    """Given to the engine directly: --speculative-config, --spec-*, LLM(speculative_config=)."""
    model_impl: str | None = "auto"
    async_scheduling: bool | None = None
    checkpoint: CheckpointInfo | None = None
    """What the target's own config.json says (local checkpoints only)."""
    max_num_seqs: int | None = None
    data_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    kv_role: str | None = None
    """vLLM's kv_transfer_config.kv_role: "kv_producer" is a prefill-only (disaggregated) role."""


@dataclass(frozen=True)
class KaitoRequest:
    """What KAITO and the operator asked for."""

    annotation: Annotation
    runtime: Annotation = field(default_factory=lambda: Annotation(None, "unset"))
    preset: str | None = None
    config_speculative_config: Mapping[str, Any] | None = None
    config_path: str | None = None
    draft: CheckpointInfo | None = None
    """The draft named by VLLM_SPECDEC_DRAFT_MODEL."""
    fallback: Fallback = "ngram"
    """The draft-free fallback (VLLM_SPECDEC_FALLBACK): a row of `core.methods.FALLBACKS`."""
    schedule: bool = True
    """Whether the plugin's own choice gets a load-aware schedule (VLLM_SPECDEC_SCHEDULE "on"
    or "static")."""
    schedule_control: bool = True
    """Whether the online controller learns that schedule's k per batch bucket from the
    engine's own steps (VLLM_SPECDEC_SCHEDULE "on"; "static" keeps the fixed table)."""


@dataclass(frozen=True)
class Decision:
    """The speculative-decoding setup the engine runs with, and why."""

    enabled: bool
    source: Source
    method: str | None = None
    speculative_config: dict[str, Any] | None = None
    model_impl: str | None = None
    async_scheduling: bool | None = None
    preset: str | None = None
    platform: str | None = None
    warnings: tuple[str, ...] = ()
    errors: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    """Why the config looks as it does (the load-aware schedule's break points)."""
    schedule_control: bool = False
    """The online schedule controller runs on the plugin's own schedule, which is its prior
    (`core/schedule_control.py`); never on a user's config or a tuned preset."""

    def to_json(self) -> str:
        """The decision as `explain` prints it (credentials in a URI, e.g. a model named as
        the preset, redacted: `core.redact`)."""
        return json.dumps(redact_strings(asdict(self)), indent=2, sort_keys=False, default=list)

    def summary(self) -> str:
        """The one INFO line logged at engine start, credentials in a URI redacted: in each
        field before it is put in the line (so the redaction keeps the line's punctuation),
        then in the line."""
        shown = replace(self, **{item.name: redact_strings(getattr(self, item.name))
                                 for item in fields(self)})
        return redact_uri(shown._summary())

    def _summary(self) -> str:
        if not self.enabled:
            return "; ".join([f"speculative decoding off ({self.source})", *self.notes])
        parts = [
            f"speculative decoding on: {json.dumps(self.speculative_config, sort_keys=True)}",
            f"source={self.source}" + (f" (preset {self.preset})" if self.preset else ""),
            f"model_impl={self.model_impl}",
            "async_scheduling="
            + ("vLLM default" if self.async_scheduling is None else str(self.async_scheduling)),
        ]
        parts += [f"adjusted: {warning}" for warning in self.warnings]
        parts += list(self.notes)
        return "; ".join(parts)

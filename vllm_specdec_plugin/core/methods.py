"""Every speculative method the plugin knows, one row each, and the draft-free fallbacks.

The way `vllm/config/speculative.py` composes its method `Literal`s and predicates: the decision,
the schedule, the checkpoint reader, the platform modules and the capability fallbacks all read
these rows, so a new method is one `MethodSpec` here (plus its tests), and a new draft-free
fallback one `FallbackSpec`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, get_args

from vllm_specdec_plugin.core.settings import FALLBACK_NAMES, Fallback
from vllm_specdec_plugin.core.types import Source

# The methods the product promises (the KAITO and RBLN pages), in the order messages list them.
PromisedMethod = Literal["ngram", "suffix", "eagle", "eagle3", "medusa", "mtp"]
PROMISED_METHODS: tuple[PromisedMethod, ...] = get_args(PromisedMethod)

Proposer = Literal["draft-free", "draft-checkpoint", "target-layers", "hidden-states"]
ScheduleFamily = Literal["draft-free", "model"]
TokensRequired = Literal["always", "without-model", "never"]


@dataclass(frozen=True)
class MethodSpec:
    """One speculative method (vLLM's `method` value) and the facts the plugin builds on."""

    name: str
    proposer: Proposer
    """Where drafts come from: nothing but the tokens (draft-free), a separate draft checkpoint
    (`model` is required), the target's own layers (mtp), or the target's hidden states."""
    schedule_family: ScheduleFamily = "draft-free"
    """Which break-point row of the load-aware schedule applies (`core/schedule.py`)."""
    draft_architecture: str | None = None
    """The word in a draft checkpoint's `architectures` that names this method."""
    on_rbln: bool = False
    """vllm-rbln 0.12's model runner accepts it (anything else: "Unsupported speculative
    decoding method", rbln_model_runner.py)."""
    known_offline: bool = False
    """Assumed present where vLLM cannot be imported (`explain` on a machine without vLLM)."""
    async_offline: bool = False
    """Assumed to run with async scheduling where vLLM cannot be imported."""
    async_by_name: bool = False
    """vLLM's VllmConfig names it as a string among the async-capable methods (vllm/config/
    vllm.py), beside the EAGLE/MTP family its Literal types list."""
    schedule_on_v1: bool = False
    """Its V1-runner proposer honours num_speculative_tokens_per_batch_size (vLLM 0.33 keeps
    the field only for these, `VllmConfig._maybe_disable_dynamic_sd_for_v1`)."""
    aux_hidden_states: bool = False
    """Its proposer reads the target's auxiliary hidden states (vLLM 0.33
    `eagle3_utils.requires_aux_hidden_states`), which pipeline parallelism must pass on."""
    graph_schedule_failure: str | None = None
    """A known failure of the schedule under full CUDA graphs that no vLLM type tells."""
    needs_package: str | None = None
    """A Python package the method needs besides vLLM."""
    needs_native_target: bool = False
    """It drafts with layers of vLLM's own implementation of the target, so the target must run
    with `model_impl` "vllm" (vLLM 0.32): MTP's drafts are vLLM's own classes, picked from the
    target's model_type (`SpeculativeConfig.hf_config_override`, config/speculative.py), that
    load the MTP layers only vLLM's own target classes leave out of the target's weights
    (mimo.py and qwen3_next.py `hf_to_vllm_mapper`, deepseek_v2.py
    `get_spec_layer_idx_from_weight_name`). The others do not: EAGLE's proposer shares the
    target's `model.embed_tokens` and `lm_head` (v1/spec_decode/llm_base_proposer.py), which
    vLLM's Transformers backend has (an engine test runs EAGLE on it); that backend implements
    SupportsEagle3 for EAGLE-3 (models/transformers/base.py, for aux layers >= 1); Medusa reads
    only the hidden states every target returns (v1/spec_decode/medusa.py)."""
    default_tokens: int | None = None
    """The plugin's num_speculative_tokens when it picks this method with a draft."""
    tokens_required: TokensRequired = "without-model"
    """When vLLM refuses a config of this method without `num_speculative_tokens` (vLLM 0.32
    `SpeculativeConfig`: "num_speculative_tokens must be provided ..."): "always" (no default
    at all: ngram, custom_class, extract_hidden_states), "without-model" (a draft or target
    checkpoint named by `model` may supply it, as `n_predict` or DSpark's block size), "never"
    (suffix defaults it to `suffix_decoding_max_tree_depth`)."""

    @property
    def needs_draft_checkpoint(self) -> bool:
        return self.proposer == "draft-checkpoint"


METHODS: Mapping[str, MethodSpec] = {spec.name: spec for spec in (
    MethodSpec("ngram", "draft-free", on_rbln=True, known_offline=True, schedule_on_v1=True,
               tokens_required="always"),
    MethodSpec("suffix", "draft-free", on_rbln=True, known_offline=True,
               needs_package="arctic_inference", tokens_required="never"),
    MethodSpec("eagle", "draft-checkpoint", "model", draft_architecture="eagle", on_rbln=True,
               known_offline=True, async_offline=True, schedule_on_v1=True, default_tokens=3),
    MethodSpec("eagle3", "draft-checkpoint", "model", draft_architecture="eagle3", on_rbln=True,
               known_offline=True, async_offline=True, schedule_on_v1=True,
               aux_hidden_states=True, default_tokens=3),
    MethodSpec("medusa", "draft-checkpoint", "model", draft_architecture="medusa", on_rbln=True,
               known_offline=True, default_tokens=3),
    MethodSpec("mtp", "target-layers", "model", on_rbln=True, known_offline=True,
               async_offline=True, schedule_on_v1=True, default_tokens=1,
               needs_native_target=True,
               graph_schedule_failure="MTP with num_speculative_tokens_per_batch_size fails "
               "full-CUDA-graph decode capture (upstream vLLM issue #48494)"),
    MethodSpec("draft_model", "draft-checkpoint", "model", known_offline=True,
               async_offline=True, async_by_name=True, schedule_on_v1=True),
    MethodSpec("mlp_speculator", "draft-checkpoint", "model", known_offline=True),
    MethodSpec("custom_class", "draft-free", known_offline=True, tokens_required="always"),
    MethodSpec("dflash", "hidden-states", "model", on_rbln=True, async_by_name=True,
               schedule_on_v1=True, aux_hidden_states=True),
    MethodSpec("dspark", "hidden-states", "model", async_by_name=True, aux_hidden_states=True),
    MethodSpec("extract_hidden_states", "hidden-states", "model", aux_hidden_states=True,
               tokens_required="always"),
)}


def method_spec(name: str | None) -> MethodSpec | None:
    return METHODS.get(name) if name is not None else None


def methods_where(predicate: str) -> frozenset[str]:
    """The names of the methods whose boolean field (or property) `predicate` is true."""
    return frozenset(name for name, spec in METHODS.items() if getattr(spec, predicate))


def draft_method_of(architectures: str) -> str | None:
    """The method a draft checkpoint runs, from its lower-cased `architectures` (the longest
    matching word first: "eagle3" before "eagle")."""
    named = sorted((spec for spec in METHODS.values() if spec.draft_architecture),
                   key=lambda spec: -len(spec.draft_architecture or ""))
    return next((spec.name for spec in named
                 if spec.draft_architecture and spec.draft_architecture in architectures), None)


@dataclass(frozen=True)
class FallbackSpec:
    """One draft-free fallback (VLLM_SPECDEC_FALLBACK): the config it injects and its source."""

    name: Fallback
    source: Source
    config: Mapping[str, Any]


# KAITO's universal fallback (KAITO v0.13.0): deliberately conservative, no prompt_lookup_min.
NGRAM_FALLBACK: Mapping[str, Any] = {
    "method": "ngram",
    "num_speculative_tokens": 5,
    "prompt_lookup_max": 4,
}
ADAPTIVE_CLASS_PATH = "vllm_specdec_plugin.adaptive.AdaptiveProposer"
# The plugin's own draft-free proposer (proposer/), loaded through vLLM's custom_class method;
# num_speculative_tokens is only its cap: it drafts per row what acceptance and load pay for.
ADAPTIVE_FALLBACK: Mapping[str, Any] = {
    "method": "custom_class",
    "model": ADAPTIVE_CLASS_PATH,
    "num_speculative_tokens": 16,
}
SOURCE_FALLBACK: Source = "ngram-fallback"
SOURCE_SUFFIX_FALLBACK: Source = "suffix-fallback"
SOURCE_ADAPTIVE_FALLBACK: Source = "adaptive-fallback"

FALLBACKS: Mapping[str, FallbackSpec] = {spec.name: spec for spec in (
    FallbackSpec("ngram", SOURCE_FALLBACK, NGRAM_FALLBACK),
    FallbackSpec("suffix", SOURCE_SUFFIX_FALLBACK, {"method": "suffix"}),
    FallbackSpec("adaptive", SOURCE_ADAPTIVE_FALLBACK, ADAPTIVE_FALLBACK),
)}
assert tuple(FALLBACKS) == FALLBACK_NAMES, "settings.Fallback and FALLBACKS list the same names"

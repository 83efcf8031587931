"""When a zero-draft step may skip the rejection sampler: every feature known to be neutral.

`rejection_path_needed` lets the `zero-draft-plain-sampler` shortcut
(`engine/changes/sample_rejection_sampler.py`) sample a step with no draft token by the plain
`Sampler` only when every field of vLLM's `SamplingMetadata` and every setting of the
`RejectionSampler` is one this module knows, at a value where both paths give the same tokens.
A field or setting vLLM adds later is unknown, so the step keeps vLLM's rejection path
("unknown sampling field X"): nothing new reaches the plain sampler unseen. The tables were read
in vLLM 0.32's and 0.33.0's `v1/sample/metadata.py`, `sampler.py` and `rejection_sampler.py`
(the same `SamplingMetadata` fields in both; tests/support/zero_draft_probe.py checks each
release's fields and settings are all known).

Why a field is neutral with zero drafts: `bonus_logits_indices` is every row in order, so the
rejection path's bonus call *is* the plain sampler on the same logits and metadata, except that
it passes `predict_bonus_token=True` (read only for penalties, bad words and the thinking
budget, which combine output with spec tokens) and asks for logprobs (`max_num_logprobs=-1`,
whose result feeds requested logprobs only). Per-request generators are drawn from only for
rows with drafts (`generate_uniform_probs`, `sample_recovered_tokens`).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any


def _always(value: Any) -> bool:
    return True


def _is_none(value: Any) -> bool:
    return value is None


def _is_false(value: Any) -> bool:
    return not value


def _is_true(value: Any) -> bool:
    return value is True


def _no_tracked_requests(holder: Any) -> bool:
    return holder is None or not holder.has_tracked_requests()


# SamplingMetadata field -> (neutral at this value?, what the rejection path is kept for).
SAMPLING_FIELDS: dict[str, tuple[Callable[[Any], bool], str]] = {
    # Sampled by the plain sampler on both paths, the same rows and metadata.
    "temperature": (_always, ""),
    "all_greedy": (_always, ""),
    "all_random": (_always, ""),
    "top_p": (_always, ""),
    "top_k": (_always, ""),
    "generators": (_always, ""),  # rejection path draws from them only for rows with drafts
    # The rejection path builds logprobs from its own raw-logits copy.
    "max_num_logprobs": (_is_none, "logprobs"),
    "logprob_token_ids": (_is_false, "logprobs"),
    # The bonus call combines output and spec tokens for penalties and bad words.
    "no_penalties": (_is_true, "penalties"),
    "prompt_token_ids": (_always, ""),  # the penalty inputs: read only with penalties
    "frequency_penalties": (_always, ""),
    "presence_penalties": (_always, ""),
    "repetition_penalties": (_always, ""),
    "output_token_ids": (_always, ""),  # read only for penalties, bad words, thinking budget
    "spec_token_ids": (_always, ""),
    "bad_words_token_ids": (_is_false, "bad words"),
    # Applied by `Sampler.apply_logits_processors` to every row on both paths; on the rejection
    # path's zero target rows only MinTokens' `apply_with_spec_decode` runs, changing nothing.
    "allowed_token_ids_mask": (_always, ""),
    "logitsprocs": (_always, ""),  # each processor's `apply`, on the same rows, both paths
    # `apply_to_logits` reads predict_bonus_token.
    "thinking_budget_state_holder": (_no_tracked_requests, "thinking budget"),
}

# RejectionSampler setting -> (neutral at this value?, reason). Its nn.Module internals (hooks
# run around either path) and its plain `sampler` are neutral too.
REJECTION_SAMPLER_SETTINGS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "sampler": (_always, ""),  # the plain sampler the shortcut calls
    "use_fp64_gumbel": (_always, ""),  # recovered-token draws (rows with drafts only)
    "is_processed_logprobs_mode": (_always, ""),  # logprobs only, which keep the path
    "is_logits_logprobs_mode": (_always, ""),
    "synthetic_mode": (_is_false, "synthetic rejection sampling"),
    "synthetic_conditional_rates": (_is_none, "synthetic rejection sampling"),
    "use_fly": (_is_false, "FLy rejection sampling"),  # vLLM 0.33
    "fly_window_size": (_is_none, "FLy rejection sampling"),
    "fly_entropy_threshold": (_always, ""),  # read only with a window size
    "fly_entropy_top_k": (_always, ""),
}


@functools.cache
def _module_internals() -> frozenset[str]:
    import torch

    return frozenset(vars(torch.nn.Module()))


_field_names_of: dict[type, tuple[str, ...] | None] = {}


def _field_names(metadata_cls: type) -> tuple[str, ...] | None:
    """The dataclass fields of `metadata_cls` (read once per class: this runs every step)."""
    if metadata_cls not in _field_names_of:
        _field_names_of[metadata_cls] = tuple(
            field.name for field in dataclasses.fields(metadata_cls)
        ) if dataclasses.is_dataclass(metadata_cls) else None
    return _field_names_of[metadata_cls]


def sampler_settings(rejection_sampler: Any) -> list[str]:
    """The rejection sampler's own settings: instance attributes, submodules, parameters and
    buffers, without nn.Module's internals."""
    own = getattr(rejection_sampler, "__dict__", {})
    names = [name for name in own if name not in _module_internals()]
    for registry in ("_modules", "_parameters", "_buffers"):
        names += list(own.get(registry) or {})
    return names


def unknown_sampling_fields(metadata_cls: type) -> list[str]:
    """Fields of `metadata_cls` (vLLM's SamplingMetadata) the guard does not know."""
    return [name for name in _field_names(metadata_cls) or () if name not in SAMPLING_FIELDS]


def unknown_sampler_settings(rejection_sampler: Any) -> list[str]:
    return [name for name in sampler_settings(rejection_sampler)
            if name not in REJECTION_SAMPLER_SETTINGS]


def rejection_path_needed(rejection_sampler: Any, sampling_metadata: Any) -> str | None:
    """Why a zero-draft step must still go through the rejection sampler; None if every
    sampling field and rejection-sampler setting is known and at a neutral value."""
    for name in unknown_sampler_settings(rejection_sampler):
        return f"unknown rejection sampler setting {name}"
    for name, (neutral, reason) in REJECTION_SAMPLER_SETTINGS.items():
        if not neutral(getattr(rejection_sampler, name, None)):
            return reason
    names = _field_names(type(sampling_metadata))
    if names is None:
        return "sampling metadata that is not a dataclass"
    for name in names:
        known = SAMPLING_FIELDS.get(name)
        if known is None:
            return f"unknown sampling field {name}"
        neutral, reason = known
        if not neutral(getattr(sampling_metadata, name)):
            return reason
    return None

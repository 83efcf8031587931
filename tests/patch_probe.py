"""Apply the plugin's vLLM fixes in a fresh process, in the order a case names; print JSON.

`python tests/patch_probe.py CASE`, CASE one of:
  plugin-first        the plugin's fixes, then the platform's kernel registration (vLLM 0.32's
                      worker: plugins load first)
  registration-first  the registration, then the plugin's fixes (a vLLM that binds the kernels
                      before plugins load); "shipped" says which bugs vLLM showed before them
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

    from vllm_specdec_plugin.engine import fixes

    def register_kernels() -> None:  # what vLLM's worker does in init_worker
        current_platform.register_triton_kernel_overrides()

    shipped = None
    if case == "plugin-first":
        fixes.apply_fixes()
        register_kernels()
    else:
        register_kernels()
        shipped = bugs()
        fixes.apply_fixes()
    again = fixes.apply_fixes()
    print("PROBE " + json.dumps({"shipped": shipped, "after": bugs(),
                                 "applied": fixes.applied_fixes(), "applied_again": again,
                                 "log": lines.lines}))


def bugs() -> list[str]:
    """The bugs that show where the rejection sampler calls vLLM, by the plugin's fix names."""
    return [name for name, broken in (("cpu-expand-kernel", expand_broken()),
                                      ("top-k-empty-batch", top_k_broken())) if broken]


if __name__ == "__main__":
    main()

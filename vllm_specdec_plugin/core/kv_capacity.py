"""How many requests one GPU's KV cache holds: a batch above it is not predicted by `whatif`.

    usable = memory * gpu_memory_utilization - weight bytes - reserve
    requests = floor(usable / KV bytes of one request)

`memory` is the hardware row's `memory_gib` (`data/hardware.yaml`, the datasheet's GB taken as
GiB), `gpu_memory_utilization` vLLM's default 0.9 (the share of the GPU the engine may take),
the weights `ModelShape.weight_bytes` (parameters x bytes per weight, the unquantized embedding
and head at 2 bytes), and the reserve what vLLM's profiling run takes beside the weights
before it sizes the cache (`ACTIVATION_RESERVE_GIB`). A request's KV bytes are those of its
tokens over all layers, a sliding-window layer holding at most its window
(`ModelShape.kv_read_bytes`, the cache one row reads, is the cache one row holds). A request's
tokens: the traffic's mean prompt plus mean completion (a request holds the whole of both when it
finishes) plus k + 1 slots for the tokens a verify step appends. Not modelled: tensor or
pipeline parallelism (one GPU), vLLM's block rounding (16 tokens per block: at most 15 tokens a
request), prefix caching (shared prompt blocks counted once per request here), and preemption
(vLLM runs a larger batch by swapping or recomputing requests, at a cost not priced).

Pure: no I/O.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from vllm_specdec_plugin.core.roofline import ModelShape

GIB = float(1 << 30)
DEFAULT_GPU_MEMORY_UTILIZATION = 0.9
"""vLLM's default `gpu_memory_utilization`: the share of the GPU's memory the engine takes."""
ACTIVATION_RESERVE_GIB = 2.0
"""GiB vLLM's profiling run finds taken beside the weights, which it does not give to the KV
cache: the peak activations of a forward over `max_num_batched_tokens` tokens (8,192 by default
on a GPU: for an 8B model about 1 GiB of hidden states, MLP intermediates and logits), the CUDA
graphs' memory pool and non-torch allocations (the CUDA context, NCCL, cuBLAS workspaces: a
few hundred MiB). A fixed figure, not measured here, chosen at the high end of that sum so that a
batch it admits is not one vLLM cannot hold; larger for larger models, smaller for small ones."""

NO_LIMIT = 1 << 31
"""`requests` where a request holds no cache."""


@dataclass(frozen=True)
class KvCapacity:
    """What one GPU's KV cache holds for a model of one shape at one request length."""

    memory_gib: float
    weights_gib: float
    reserve_gib: float
    gpu_memory_utilization: float
    kv_gib: float
    """GiB left for the KV cache (negative: the weights and reserve alone do not fit)."""
    tokens_per_request: int
    request_gib: float
    """KV GiB of one request of `tokens_per_request` tokens."""
    requests: int
    """Requests the cache holds at once (0 where the weights do not fit)."""

    @property
    def weights_fit(self) -> bool:
        return self.kv_gib > 0

    def fits(self, batch: int) -> bool:
        """Whether `batch` running requests fit the cache."""
        return batch <= self.requests


def kv_capacity(shape: ModelShape, memory_gib: float, tokens_per_request: int,
                gpu_memory_utilization: float = DEFAULT_GPU_MEMORY_UTILIZATION,
                reserve_gib: float = ACTIVATION_RESERVE_GIB) -> KvCapacity:
    """The requests of `tokens_per_request` tokens the KV cache of one GPU of `memory_gib`
    holds beside `shape`'s weights (the module docstring's arithmetic)."""
    if not memory_gib > 0 or tokens_per_request < 1 or not 0 < gpu_memory_utilization <= 1:
        raise ValueError(f"memory_gib {memory_gib}, tokens_per_request {tokens_per_request}, "
                         f"gpu_memory_utilization {gpu_memory_utilization}: need memory > 0, "
                         "tokens >= 1 and a utilization in (0, 1]")
    weights = shape.weight_bytes / GIB
    kv = memory_gib * gpu_memory_utilization - weights - reserve_gib
    request = shape.kv_read_bytes(tokens_per_request) / GIB
    # a shape without a cache (no KV heads) holds any batch
    held = math.floor(kv / request) if request > 0 else NO_LIMIT
    requests = held if kv > 0 else 0
    return KvCapacity(memory_gib, weights, reserve_gib, gpu_memory_utilization, kv,
                      tokens_per_request, request, requests)

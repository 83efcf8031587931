"""A roofline prior for step costs: what one engine step costs from a checkpoint's shape and a
row of the hardware table, for `whatif` when no running engine measured the costs (`--costs`).

One model of a step, additive, so that it reproduces linear published fits (SpecDecode-Bench's
`fixed + per batched token + per KV token`, arXiv 2601.11580):

    t(rows, q, ctx) = overhead + streamed_bytes(rows * q) / (BW * e_bw)
                      + rows * q * flops_per_token / (FLOPS * e_f)
                      + rows * max(kv_read(ctx) / (BW * e_bw),
                                   q * attention_flops(ctx) / (FLOPS * e_f))

for `rows` requests verifying `q` tokens each over `ctx` cached tokens. Refinements the test
vectors asked for, each documented where it lives: attention is one memory-bound read of the
cache per row (its FLOPs bind only when they exceed that read, never at decode: q * heads /
kv_heads FLOPs per byte is far below any GPU's ridge), so verify tokens do not re-read the
cache; a hybrid model's sliding-window layers read at most their window; an untied input
embedding table is only looked up, not streamed; a MoE streams the experts the step's tokens
were routed to (expected share `1 - (1 - k/E)^tokens`). Draft costs: the draft-free methods
(ngram, suffix, adaptive) add only the verified tokens; `mtp` adds, per drafted position, one
forward of the draft (the target's one MTP layer and lm_head, or a given draft shape, such as
Gemma 4's assistant) over one token per row, sequential and so memory-bound at small batch.

Pure: no I/O. The table of hardware is `data/hardware.yaml`, read by `inputs/hardware.py`;
a checkpoint's config.json becomes a `ModelShape` in `inputs/model_shape.py`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from vllm_specdec_plugin.core.step_cost import BucketCost, StepCostCurve, bucket, bucket_bounds

GIGA, TERA = 1e9, 1e12
BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
"""Batch sizes a prior curve covers: one bucket each (`core/step_cost.bucket`)."""
DRAFT_FREE = ("ngram", "suffix", "adaptive")
METHODS = (*DRAFT_FREE, "mtp")


@dataclass(frozen=True)
class ModelShape:
    """What a step costs depends on: sizes from config.json (`inputs/model_shape.py`)."""

    parameters: int
    """All weights, every expert, embeddings once when tied."""
    active_parameters: int
    """Weights one token uses (a MoE's routed experts only), embeddings included."""
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    weight_bytes_per_param: float = 2.0
    """bf16/fp16 2, fp8/int8 1, int4 0.5 (the quantized linear layers)."""
    kv_bytes_per_element: float = 2.0
    mtp_layers: int = 0
    max_context: int = 0
    tied_embeddings: bool = False
    expert_parameters: int = 0
    """The routed experts' weights, all of them (0: dense)."""
    experts: int = 0
    experts_per_token: int = 0
    sliding_layers: int = 0
    """Layers that attend to the last `sliding_window` tokens only (Gemma 2/3/4)."""
    sliding_window: int = 0
    global_kv_heads: int = 0
    """The full-attention layers' KV heads where they differ (Gemma 4); 0: `kv_heads`."""
    global_head_dim: int = 0
    unquantized_parameters: int = 0
    """Weights kept at 2 bytes in a quantized checkpoint (embedding and lm_head)."""
    fp8_compute: bool = False
    """The matmuls run in FP8 (W8A8), so the hardware's FP8 rate applies."""
    name: str = "model"

    @property
    def embedding_parameters(self) -> int:
        return self.vocab * self.hidden

    @property
    def weight_bytes(self) -> float:
        """Bytes the weights take."""
        quantized = self.parameters - self.unquantized_parameters
        return quantized * self.weight_bytes_per_param + 2.0 * self.unquantized_parameters

    def streamed_bytes(self, tokens: float) -> float:
        """Weight bytes one forward over `tokens` tokens reads: an untied input embedding is
        only looked up, and experts no token was routed to are not read."""
        looked_up = 0.0
        if not self.tied_embeddings:
            per = 2.0 if self.unquantized_parameters else self.weight_bytes_per_param
            looked_up = self.embedding_parameters * per
        idle = self.expert_parameters * (1.0 - self.experts_touched(tokens))
        return self.weight_bytes - looked_up - idle * self.weight_bytes_per_param

    def experts_touched(self, tokens: float) -> float:
        """Expected share of a MoE layer's experts that `tokens` routed tokens reach."""
        if not self.experts:
            return 1.0
        idle: float = (1.0 - self.experts_per_token / self.experts) ** max(tokens, 1.0)
        return 1.0 - idle

    def _layer_kv(self, full: bool) -> float:
        heads = (self.global_kv_heads or self.kv_heads) if full else self.kv_heads
        dim = (self.global_head_dim or self.head_dim) if full else self.head_dim
        return 2.0 * heads * dim * self.kv_bytes_per_element

    @property
    def kv_bytes_per_token(self) -> float:
        """Cache bytes of one token over all layers (2 * layers * kv_heads * head_dim * bytes)."""
        full = self.layers - self.sliding_layers
        return full * self._layer_kv(True) + self.sliding_layers * self._layer_kv(False)

    def kv_read_bytes(self, context: int) -> float:
        """Cache bytes one row reads per forward at `context` cached tokens (a sliding layer
        reads at most its window)."""
        window = min(context, self.sliding_window) if self.sliding_window else context
        full = self.layers - self.sliding_layers
        return full * self._layer_kv(True) * context + (
            self.sliding_layers * self._layer_kv(False) * window)

    @property
    def flops_per_token(self) -> float:
        """Matmul FLOPs of one token: 2 per active weight, the input embedding (a lookup) aside."""
        looked_up = 0 if self.tied_embeddings else self.embedding_parameters
        return 2.0 * (self.active_parameters - looked_up)

    def attention_flops(self, context: int) -> float:
        """QK^T and AV of one query token over `context` cached tokens."""
        window = min(context, self.sliding_window) if self.sliding_window else context
        full = self.layers - self.sliding_layers
        full_dim = self.global_head_dim or self.head_dim
        return 4.0 * self.heads * (full * full_dim * context
                                   + self.sliding_layers * self.head_dim * window)


@dataclass(frozen=True)
class Hardware:
    """One row of `data/hardware.yaml`: peak figures from the vendor's datasheet and the
    efficiencies and overhead that the published test vectors calibrated."""

    name: str
    bandwidth_gbs: float
    bf16_tflops: float
    """Dense (no 2:4 sparsity) BF16 tensor FLOPs."""
    fp8_tflops: float | None
    """Dense FP8 tensor FLOPs; None where there is no FP8 unit (W8A16 runs at the BF16 rate)."""
    bandwidth_efficiency: float
    flops_efficiency: float
    """Achieved share of the BF16 peak in a step's matmuls."""
    fp8_flops_efficiency: float
    """Achieved share of the FP8 peak in W8A8 matmuls."""
    overhead_s: float
    """Fixed seconds of a step beside streaming the weights: launches, scheduler, sampler."""
    switch_share: float
    """A drafting step's extra over a plain one (proposer, rejection sampler), as a share."""
    title: str = ""
    sources: dict[str, str] = field(default_factory=dict, compare=False)
    memory_gib: float | None = None
    """The GPU's memory (the datasheet's GB, taken as GiB), for the KV capacity
    (`core/kv_capacity.py`); None on the cpu row (vLLM's `VLLM_CPU_KVCACHE_SPACE` sizes it)."""
    host_overhead_s: float = 0.0
    """Of `overhead_s`, the host's work per step (scheduler, input preparation, output
    processing) that a plain engine's async scheduling overlaps with the forward pass; 0 on the
    cpu row (vLLM's CPU platform runs no async scheduling)."""

    @property
    def bytes_per_s(self) -> float:
        return self.bandwidth_gbs * GIGA * self.bandwidth_efficiency

    def flops_per_s(self, shape: ModelShape) -> float:
        if shape.fp8_compute and self.fp8_tflops:
            return self.fp8_tflops * TERA * self.fp8_flops_efficiency
        return self.bf16_tflops * TERA * self.flops_efficiency


def step_seconds(shape: ModelShape, hw: Hardware, rows: int, tokens_per_row: float,
                 context: int) -> float:
    """Seconds of one step: `rows` requests, `tokens_per_row` tokens each (1 + drafted), over
    `context` cached tokens (the module docstring's formula)."""
    if rows < 1 or tokens_per_row < 1 or context < 0:
        raise ValueError(f"rows {rows}, tokens_per_row {tokens_per_row}, context {context}: "
                         "need rows >= 1, tokens_per_row >= 1, context >= 0")
    tokens = rows * tokens_per_row
    bw, flops = hw.bytes_per_s, hw.flops_per_s(shape)
    # attention is one pass over the cache per row: memory-bound unless its FLOPs exceed it
    attention = max(shape.kv_read_bytes(context) / bw,
                    tokens_per_row * shape.attention_flops(context) / flops)
    return (hw.overhead_s + shape.streamed_bytes(tokens) / bw
            + tokens * shape.flops_per_token / flops + rows * attention)


def mtp_draft(shape: ModelShape) -> ModelShape:
    """The draft of native MTP: one layer of the target (its average layer, a MoE layer's
    experts included) and the lm_head, with its own full-attention cache."""
    embeddings = shape.embedding_parameters * (1 if shape.tied_embeddings else 2)
    layer = (shape.parameters - embeddings) // max(shape.layers, 1)
    active = (shape.active_parameters - embeddings) // max(shape.layers, 1)
    return replace(
        shape, parameters=layer + shape.embedding_parameters,
        active_parameters=active + shape.embedding_parameters, layers=1, mtp_layers=0,
        tied_embeddings=True, expert_parameters=shape.expert_parameters // max(shape.layers, 1),
        sliding_layers=0, sliding_window=0,
        unquantized_parameters=shape.embedding_parameters if shape.unquantized_parameters else 0,
        name=f"{shape.name} mtp")


def draft_position_seconds(draft: ModelShape, hw: Hardware, rows: int, context: int) -> float:
    """One drafted position for every row: the draft's forward over one token per row (inside
    the step, so no overhead of its own)."""
    return step_seconds(draft, hw, rows, 1, context) - hw.overhead_s


def fixed_tokens(shape: ModelShape, hw: Hardware, context: int) -> float:
    """A step's fixed part in rows' worth (`StepCostCurve.fixed_tokens`): with the additive
    model a plain step is A + B * rows, and the curve's scaling within a bucket is exact when
    this is A / B (a MoE's expert reads growing with rows aside)."""
    bw, flops = hw.bytes_per_s, hw.flops_per_s(shape)
    per_row = shape.flops_per_token / flops + max(
        shape.kv_read_bytes(context) / bw, shape.attention_flops(context) / flops)
    return (hw.overhead_s + shape.streamed_bytes(1) / bw) / per_row


def roofline_curve(shape: ModelShape, hw: Hardware, context: int, method: str = "ngram",
                   batches: Iterable[int] = BATCHES,
                   draft: ModelShape | None = None) -> StepCostCurve:
    """A prior `StepCostCurve`: per bucket of `batches`, at the bucket's lowest batch size,
    the plain step, the switch (`hw.switch_share` of it) and the marginal cost of one more
    verified token (for `mtp` also drafted: one draft position's forward over the rows,
    per row). `draft`: the mtp draft's shape (default `mtp_draft(shape)`)."""
    if method not in METHODS:
        raise ValueError(f"method {method!r}: one of {', '.join(METHODS)}")
    drafter = (draft or mtp_draft(shape)) if method == "mtp" else None
    buckets: dict[int, BucketCost] = {}
    for key in sorted({bucket(b) for b in batches}):
        rows = bucket_bounds(key)[0]
        base = step_seconds(shape, hw, rows, 1, context)
        per_token = (step_seconds(shape, hw, rows, 2, context) - base) / rows
        if drafter is not None:
            per_token += draft_position_seconds(drafter, hw, rows, context) / rows
        buckets[key] = BucketCost(base, hw.switch_share * base, per_token, float(rows))
    return StepCostCurve(buckets, f"prior: roofline {hw.name} ({shape.name}, context {context})",
                         frozenset(), fixed_tokens(shape, hw, context))


def count_parameters(*, layers: int, hidden: int, heads: int, kv_heads: int, head_dim: int,
                     intermediate: int, vocab: int, tied: bool, experts: int = 0,
                     experts_per_token: int = 0, expert_intermediate: int = 0,
                     shared_intermediate: int = 0, dense_layers: int = 0,
                     global_layers: int = 0, global_kv_heads: int = 0,
                     global_head_dim: int = 0, k_eq_v: bool = False,
                     qkv_bias: bool = False) -> tuple[int, int, int]:
    """(total, active, routed expert) weights from a decoder's sizes: embeddings (twice when
    untied), GQA attention (q, k, v, o; Gemma 4's full-attention layers with their own head
    size and KV heads, and no v projection where K = V), a gated MLP (3 matrices), a MoE's
    router and experts (top-k active) beside `dense_layers` plain MLP layers and any shared
    expert, and the norms (2 per layer and a final one; a few thousand weights each)."""
    def attention(kv: int, dim: int, no_v: bool) -> int:
        bias = (heads + 2 * kv) * dim if qkv_bias else 0
        return hidden * dim * (2 * heads + kv * (1 if no_v else 2)) + bias

    local = layers - global_layers
    attn = local * attention(kv_heads, head_dim, False) + global_layers * attention(
        global_kv_heads or kv_heads, global_head_dim or head_dim, k_eq_v)
    mlp = 3 * hidden * intermediate
    moe_layers = layers - dense_layers if experts else 0
    expert = 3 * hidden * (expert_intermediate or intermediate)
    routed = moe_layers * experts * expert
    per_moe_layer = hidden * experts + 3 * hidden * shared_intermediate
    body = attn + (layers - moe_layers) * mlp + moe_layers * per_moe_layer + 2 * hidden * layers
    embeddings = vocab * hidden * (1 if tied else 2) + hidden
    total = body + routed + embeddings
    active = body + moe_layers * experts_per_token * expert + embeddings
    return total, active, routed

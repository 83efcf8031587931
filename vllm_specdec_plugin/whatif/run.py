"""One `whatif` run, from options to a report: the stages wired in order, no printing.

read the traffic (`inputs/traffic.py`) -> tokenize it with the model's tokenizer (`tokens.py`)
-> replay each configuration (`replay.py`) through the drafter the target host's vLLM runs for it
(`drafter.host_drafter`: on cuda, ngram is Model Runner V2's, `replay_mrv2.py`) -> price the
steps with one step-cost curve (`core/step_cost.StepCostCurve`: `--costs` from a running engine,
filled where it has no bucket from the platform's prior, `core/roofline.py`), the plain engine's
step less the host work its async scheduling hides where the speculating one runs synchronously
(`drafter.async_scheduling`: on cuda) -> predicted
speedup per batch size and the recommendation (`core/speedup.py`), each batch size with the
model error of what priced it, and none above the KV capacity of the row's GPU
(`model_error.py`). `cli/whatif.py` parses the
flags, `render.py` prints.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from vllm_specdec_plugin.core.curve_error import ASYNC_NOT_PRICED, NOT_PRICED, CurveError
from vllm_specdec_plugin.core.errors import SpecDecodeConfigError
from vllm_specdec_plugin.core.kv_capacity import KvCapacity
from vllm_specdec_plugin.core.limits import (
    MAX_BATCH_SIZE,
    MAX_MODEL_LEN,
    MAX_REQUEST_TOKENS,
    MAX_TRAFFIC_REQUESTS,
)
from vllm_specdec_plugin.core.speedup import (
    Predicted,
    Recommendation,
    ReplayCounts,
    predict,
    prior_share,
    recommend,
)
from vllm_specdec_plugin.core.step_cost import StepCostCurve
from vllm_specdec_plugin.whatif.drafter import AsyncScheduling
from vllm_specdec_plugin.whatif.types import MethodConfig, ReplayRequest, ReplayResult

DEFAULT_BATCHES = (1, 2, 4, 8, 16, 32, 64, 128)
"""The batch sizes predicted: the lowest batch of each controller bucket up to 128."""

READ_STAGE = "read (MiB)"
"""The progress stage of reading the traffic file, counted in MiB (the "tokenize" stage counts
records tokenized of those read so far: they are tokenized as they are read)."""

Progress = Callable[[str, int, int], None]
"""progress(stage, done, total): called as a stage advances (the CLI draws a bar)."""


@dataclass(frozen=True)
class WhatifOptions:
    """What to replay and how to price it (the command's flags, parsed)."""

    model: str
    traffic: str
    configs: tuple[MethodConfig, ...]
    costs: str | None = None
    platform: str | None = None
    """None: cuda with `gpu`, else cpu (the default, said in the output)."""
    gpu: str | None = None
    batches: tuple[int, ...] = DEFAULT_BATCHES
    max_requests: int | None = None
    max_model_len: int | None = None
    """Default: the checkpoint's context length."""
    runner: str | None = None
    """The target's model runner, "v1" or "v2", as `VLLM_USE_V2_MODEL_RUNNER` forces it; None:
    as vLLM chooses on the platform (`drafter.host_drafter`)."""


@dataclass(frozen=True)
class MethodOutcome:
    """One configuration's replay and what it predicts."""

    result: ReplayResult
    predicted: list[Predicted]
    async_scheduling: AsyncScheduling | None = None
    """How the target schedules the plain and the speculating engine, as priced
    (`drafter.async_scheduling`)."""

    @property
    def label(self) -> str:
        return label(self.result.config, self.result.resolved)

    @property
    def replay_tokens_per_s(self) -> float | None:
        seconds = self.result.seconds
        return float(self.result.output_tokens.sum()) / seconds if seconds > 0 else None


@dataclass(frozen=True)
class WhatifReport:
    """Everything the outputs show."""

    options: WhatifOptions
    traffic: dict[str, Any]
    """format, entries, skipped, first_bad, requests, output_tokens, prompt/completion means."""
    model: dict[str, Any]
    curve: StepCostCurve
    prior_share: float
    """The share of predicted batch sizes priced from a prior, not from measured costs."""
    outcomes: list[MethodOutcome]
    recommendation: Recommendation
    notes: list[str] = field(default_factory=list)
    pricing: dict[str, Any] = field(default_factory=dict)
    """The hardware row that priced it, why that row, and what it priced
    (`curves.Pricing.describe`)."""
    errors: dict[int, CurveError] = field(default_factory=dict)
    """Per batch size, the model error of what priced it (`model_error.batch_errors`)."""
    capacity: KvCapacity | None = None
    """The KV capacity of the row's GPU (None: not checked; `capacity_note` says why). A batch
    above it is not predicted: it is absent from each outcome's `predicted`."""
    capacity_note: str = ""
    not_priced: tuple[str, ...] = NOT_PRICED
    """What no source priced (`core/curve_error.NOT_PRICED`, with async scheduling where the
    target's has no price)."""


def label(config: MethodConfig, resolved: dict[str, Any] | None = None) -> str:
    """"suffix k=24", "ngram k=5 n=4-4" (the n-gram lengths as vLLM resolved them)."""
    text = f"{config.method} k={config.k}"
    if config.method == "ngram":
        low = (resolved or {}).get("prompt_lookup_min", config.prompt_lookup_min)
        high = (resolved or {}).get("prompt_lookup_max", config.prompt_lookup_max)
        if low is not None or high is not None:
            text += f" n={low or '-'}-{high or '-'}"
    return text


def run_whatif(options: WhatifOptions, progress: Progress | None = None) -> WhatifReport:
    """Every stage in order, the cheap checks first (`--costs`, the platform and row, the
    drafter, the traffic path; then the configurations as vLLM resolves them, the checkpoint's
    config and tokenizer), so a bad input is refused before the traffic is read; errors are the
    stages' own one-line errors."""
    from vllm_specdec_plugin.engine.releases import installed_vllm, release_of
    from vllm_specdec_plugin.inputs.traffic import open_traffic, stream_traffic
    from vllm_specdec_plugin.whatif.curves import curve_for, pricing_for
    from vllm_specdec_plugin.whatif.drafter import async_scheduling, host_drafter
    from vllm_specdec_plugin.whatif.model_error import batch_errors, capacity_for
    from vllm_specdec_plugin.whatif.replay import replay, resolve
    from vllm_specdec_plugin.whatif.tokens import load_tokenizer, tokenize_traffic

    _check_counts(options)
    pricing = pricing_for(options.costs, options.platform, options.gpu)
    drafters = {config: host_drafter(config.method, pricing.platform, options.runner)
                for config in options.configs}
    host_s = pricing.row.host_overhead_s if pricing.row is not None else 0.0
    release = release_of(installed_vllm())
    asyncs = {config: async_scheduling(config.method, drafters[config].name, pricing.platform,
                                       host_s, release) for config in options.configs}
    open_traffic(options.traffic).close()
    for config in options.configs:  # vLLM's own check: its import alone takes seconds
        resolve(config)
    shape, max_model_len = _model(options)
    tokenizer = load_tokenizer(options.model)
    # Read and tokenized record by record: only the tokens are held, and the reading stops
    # where tokenizing stops (the bound on tokens held), whatever the file's size.
    with stream_traffic(options.traffic, options.max_requests, None if progress is None else
                        lambda done, total: progress(READ_STAGE, done, total)) as (stream,
                                                                                   records):
        first = next(records, None)  # the format is known from the first record on
        tokenized = tokenize_traffic(
            tokenizer, itertools.chain(() if first is None else (first,), records),
            max_tokens_per_request=min(max_model_len, MAX_REQUEST_TOKENS),
            progress=_stage(progress, "tokenize", lambda: stream.reader.read),
            unit="conversation" if stream.format == "sharegpt" else "line")
    traffic = stream.file()  # nothing usable read: its one-line TrafficError
    requests = tokenized.requests
    if not requests:
        from vllm_specdec_plugin.inputs.traffic import TrafficError

        why = f" (first: {tokenized.first_bad[1]})" if tokenized.first_bad else ""
        raise TrafficError(f"--traffic {options.traffic}: no request could be tokenized with "
                           f"--model {options.model}{why}; check that the traffic was served "
                           "by this model")
    context = _mean_context(requests)
    curve = curve_for(pricing, shape, context)
    summary = _traffic_summary(options.traffic, traffic, tokenized, requests)
    capacity, capacity_note = capacity_for(
        pricing.row, shape, summary["mean_prompt_tokens"] + summary["mean_completion_tokens"],
        max(config.k for config in options.configs))
    fitting = tuple(b for b in options.batches if capacity is None or capacity.fits(b))
    outcomes = []
    for config in options.configs:
        result = replay(requests, config, max_model_len=max_model_len,
                        step_seconds=_step_seconds(curve), drafter=drafters[config],
                        progress=_stage(progress, label(config), len(requests), total=True))
        hidden = asyncs[config].hidden_s or 0.0
        outcomes.append(MethodOutcome(result, predict(ReplayCounts.of(result), curve, fitting,
                                                      hidden_s=hidden) if fitting else [],
                                      asyncs[config]))
    errors = batch_errors(pricing.row, curve, options.batches)
    # a batch counts as paying only where the interval widened by a known model error stays
    # above 1: a recommendation the curve's own error could turn into a loss is not made
    chosen = recommend({o.label: [_with_model_low(p, errors[p.batch]) for p in o.predicted]
                        for o in outcomes},
                       {o.label: o.result.config.k for o in outcomes},
                       {o.label: o.result.config.method for o in outcomes})
    share = prior_share(curve, options.batches)
    return WhatifReport(
        options=options, traffic=summary,
        model={"path": options.model, "parameters": getattr(shape, "parameters", None),
               "max_model_len": max_model_len, "mean_context": round(context, 1)},
        curve=curve, prior_share=share, outcomes=outcomes, recommendation=chosen,
        pricing=pricing.describe(curve, share),
        errors=errors, capacity=capacity,
        capacity_note=capacity_note,
        not_priced=NOT_PRICED + ((ASYNC_NOT_PRICED,) if any(
            a.hidden_s is None for a in asyncs.values()) else ()))


def _with_model_low(predicted: Predicted, error: CurveError) -> Predicted:
    """`predicted` with its low end widened by a known model error (unknown: as it is)."""
    low, high = error.band(predicted.low, predicted.high)
    if low is None or high is None:
        return predicted
    return Predicted(predicted.batch, predicted.speedup, low, high)


def _check_counts(options: WhatifOptions) -> None:
    """The numeric options within their bounds (`core/limits.py`), else one line."""
    for flag, value, high in (("--max-requests", options.max_requests, MAX_TRAFFIC_REQUESTS),
                              ("--max-model-len", options.max_model_len, MAX_MODEL_LEN)):
        low = 2 if flag == "--max-model-len" else 1
        if value is not None and not (isinstance(value, int) and low <= value <= high):
            raise SpecDecodeConfigError(f"{flag} {value!r}: give a whole number from {low} to "
                                        f"{high}")
    if not options.batches or not all(isinstance(b, int) and 1 <= b <= MAX_BATCH_SIZE
                                      for b in options.batches):
        raise SpecDecodeConfigError(f"--batches {options.batches!r}: give batch sizes from 1 to "
                                    f"{MAX_BATCH_SIZE}")


def _stage(progress: Progress | None, stage: str, count: int | Callable[[], int],
           total: bool = False) -> Callable[[int], None] | None:
    """A stage's callback: given the items done since the last call (the tokenizer's), or
    with `total` the items done so far (the replay's); `count` the items in all, or what
    gives the items known so far."""
    if progress is None:
        return None
    done = [0]

    def advance(n: int) -> None:
        done[0] = n if total else done[0] + n
        progress(stage, done[0], count if isinstance(count, int) else count())

    return advance


def _model(options: WhatifOptions) -> tuple[Any, int]:
    """The checkpoint's shape (for the priors; None where its config cannot be read and
    `--costs` prices every step) and the context length the replay clips to."""
    from vllm_specdec_plugin.inputs.model_shape import read_model_shape

    try:
        shape = read_model_shape(options.model)
    except SpecDecodeConfigError:
        if options.costs is None:
            raise
        shape = None
    context = int(getattr(shape, "max_context", 0) or 0)
    if options.max_model_len is None and context > MAX_MODEL_LEN:
        raise SpecDecodeConfigError(
            f"--model {options.model}: its config.json gives a context of {context} tokens, "
            f"above the bound of {MAX_MODEL_LEN}; give --max-model-len N (at most "
            f"{MAX_MODEL_LEN})")
    return shape, options.max_model_len or context or MAX_REQUEST_TOKENS


def _mean_context(requests: Sequence[ReplayRequest]) -> float:
    """The mean tokens in context over a request's decode: its prompt and half its output."""
    sizes = [len(r.prompt_ids) + len(r.completion_ids) / 2 for r in requests]
    return float(np.mean(sizes)) if sizes else 0.0


def _step_seconds(curve: StepCostCurve) -> Callable[[int, int], float]:
    """The simulated time of one step (the adaptive replay's clock), from the same curve."""
    def seconds(rows: int, drafted: int) -> float:
        return curve.seconds(rows, drafted, 1.0 if drafted else 0.0)

    return seconds


def _traffic_summary(path: str, traffic: Any, tokenized: Any,
                     requests: Sequence[ReplayRequest]) -> dict[str, Any]:
    """What was read and replayed, each count in one unit: `entries` (lines, or a ShareGPT
    array's conversations: `unit`) and the reader's `skipped` of them; `requests_read` (a
    conversation holds one request per answer, an OpenAI response one per choice) and
    `requests_skipped` of them when tokenizing; what stopped the reading early, if anything."""
    def bad(first: tuple[int, str] | None) -> dict[str, Any] | None:
        return None if first is None else {"line": first[0], "why": first[1]}

    stops = [why for why in (traffic.stop_reason, tokenized.stop_reason) if why]
    return {
        "path": path, "format": traffic.format, "entries": traffic.entries,
        "unit": "conversation" if traffic.format == "sharegpt" else "line",
        "skipped": traffic.skipped, "first_bad": bad(traffic.first_bad),
        "requests_read": traffic.requests_read, "requests_skipped": tokenized.skipped,
        "first_skipped_request": bad(tokenized.first_bad),
        "truncated": bool(stops), "stop_reason": "; ".join(stops) or None,
        "requests": len(requests),
        "output_tokens": int(sum(len(r.completion_ids) for r in requests)),
        "mean_prompt_tokens": round(float(np.mean([len(r.prompt_ids) for r in requests])), 1),
        "mean_completion_tokens": round(
            float(np.mean([len(r.completion_ids) for r in requests])), 1)}

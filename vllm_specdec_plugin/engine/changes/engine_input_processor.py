"""Changes to vLLM's request intake (`vllm.v1.engine.input_processor.InputProcessor`).

`request-speculation` (shortcut, the front end's half; the scheduler's half is in
`core_sched_scheduler.py`): `InputProcessor._validate_params` is where vLLM checks every
request's `SamplingParams` before it reaches the engine core, in the API server (`vllm serve`,
chat and completions alike) and in the offline `LLM()`/`AsyncLLM` process. After
vLLM's own checks the wrapper reads `extra_args["num_speculative_tokens"]` (the OpenAI server's
`vllm_xargs`, `core/request_tokens.py`): a bad value is refused with vLLM's own
`VLLMValidationError` (the OpenAI server answers 400 naming `vllm_xargs.num_speculative_tokens`,
the value and what is accepted; `LLM.generate` raises it), never an engine error, never a silent
default. A good one is counted in `vllm_specdec_requests_total{speculation="on|off|capped"}`.
Only an opted-in engine has this change; on an engine without speculative decoding the field is
ignored with one DEBUG line per request.
"""

from __future__ import annotations

import functools
import logging
import os
from typing import Any

from vllm_specdec_plugin.core.request_tokens import (
    FIELD,
    PARAMETER,
    REQUESTS_METRIC,
    RequestTokensError,
    parse_default,
    request_cap,
    speculation_label,
)
from vllm_specdec_plugin.core.settings import ENV_REQUEST_TOKENS
from vllm_specdec_plugin.engine import patching
from vllm_specdec_plugin.engine.patching import Change, apply_patch, prove

MODULE = "vllm.v1.engine.input_processor"
_counter: list[Any] = []  # the Counter, made on the first counted request of the process


def count(model_name: str, label: str) -> None:
    """One request in `vllm_specdec_requests_total` (this process's Prometheus registry; with
    several API servers vLLM's multiprocess directory sums them, as for its own counters)."""
    if not _counter:
        from prometheus_client import Counter

        _counter.append(Counter(
            REQUESTS_METRIC.removesuffix("_total"),
            "Requests admitted by an opted-in engine, by how they speculate: the engine's k "
            "(on), none (off: vllm_xargs.num_speculative_tokens=0) or fewer tokens (capped)",
            labelnames=("model_name", "speculation")))
    _counter[0].labels(model_name=model_name, speculation=label).inc()


def _patch_input_processor(announce: bool) -> None:
    from vllm import SamplingParams
    from vllm.exceptions import VLLMValidationError
    from vllm.v1.engine import input_processor as module

    from vllm_specdec_plugin.engine.metrics import served_model_name

    owner = module.InputProcessor
    original = patching.checked_original(owner, "_validate_params",
                                         ["self", "params", "supported_tasks"])
    # Validated by the engine hook before vLLM builds anything (core/settings.check_settings).
    default = parse_default(os.environ.get(ENV_REQUEST_TOKENS))

    @functools.wraps(original)
    def _validate_params(self: Any, params: Any, supported_tasks: Any) -> Any:
        result = original(self, params, supported_tasks)
        if not isinstance(params, SamplingParams):
            return result
        extra = params.extra_args
        speculative = self.speculative_config
        if speculative is None:
            if extra and FIELD in extra:
                patching.log(logging.DEBUG, "vllm-specdec-plugin: %s ignored: this engine "
                             "does not speculate", PARAMETER)
            return result
        try:
            cap = request_cap(extra, default)
        except RequestTokensError as exc:
            # The message names the value already; vLLM appends `parameter=` to it.
            raise VLLMValidationError(str(exc), parameter=PARAMETER) from None
        count(served_model_name(self.vllm_config),
              speculation_label(cap, int(speculative.num_speculative_tokens or 0)))
        return result

    apply_patch(REQUEST_SPECULATION.patch(
        owner, "_validate_params", f"checks and counts extra_args[{FIELD!r}] (vllm_xargs) of "
        "each request"), _validate_params, announce=announce)
    prove(REQUEST_SPECULATION, lambda: owner._validate_params is not _validate_params,
          f"{MODULE}.InputProcessor._validate_params (process_inputs)", announce)


REQUEST_SPECULATION = Change(
    name="request-speculation", kind="shortcut",
    targets=(f"{MODULE}.InputProcessor._validate_params",),
    tested_on=("0.32", "0.33"), apply=_patch_input_processor,
    without="vllm_xargs.num_speculative_tokens is ignored: every request speculates alike",
    trigger=MODULE)

"""How a benchmark gets its engine: the default model, the shared settings, the in-process engine.

`start_llm` is the one place a probe builds `LLM()`. In process (the default) it runs the engine
core and the worker in the calling process (`VLLM_ENABLE_V1_MULTIPROCESSING=0`, the `uni`
executor), so a probe can wrap vLLM's and the proposer's methods with timers or switch the
plugin's patches on and off between blocks; that is not the production layout (there the worker
is a process of its own), so such probes compare parts and arms, not totals. With
`in_process=False` it is a plain engine with the same settings (`probes/verify_cost.py`, whose
proposer runs in the worker process).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

IN_PROCESS_ENV = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0", "HF_HUB_OFFLINE": "1"}
"""The engine core in this process, and no network (the model is a local checkpoint)."""
ENGINE_DEFAULTS: dict[str, Any] = {"enforce_eager": True, "seed": 0,
                                   "kv_cache_memory_bytes": 1 << 30, "max_model_len": 2048}
"""The settings every probe's engine shares (the paired harness's defaults too)."""


def model_path(model: str | None = None) -> str:
    """`model` as given, else the SmolLM2-135M checkpoint (`benchmarks/smollm2.py`), built on
    first use."""
    if model is not None:
        return model
    from benchmarks.smollm2 import ensure_smollm2

    return str(ensure_smollm2())


def use_in_process_engine(env: Mapping[str, str] | None = None) -> None:
    """Set the environment of an in-process engine (and `env`, the plugin's inputs) before
    anything that reads it runs."""
    os.environ.update({**IN_PROCESS_ENV, **(env or {})})


def start_llm(model: str | None, max_num_seqs: int, *, in_process: bool = True,
              env: Mapping[str, str] | None = None, **llm_kwargs: Any) -> Any:
    """`LLM()` on `model` (default SmolLM2) with `ENGINE_DEFAULTS`, overridden by `llm_kwargs`.

    In process: `use_in_process_engine(env)` and the `uni` executor (the default for one
    worker, named so it cannot change under the probe). Otherwise `env` is added to the process
    environment only.
    """
    if in_process:
        use_in_process_engine(env)
        llm_kwargs.setdefault("distributed_executor_backend", "uni")
    else:
        os.environ.update(env or {})
    from vllm import LLM

    return LLM(model=model_path(model), max_num_seqs=max_num_seqs,
               **{**ENGINE_DEFAULTS, **llm_kwargs})

"""Where a test's vLLM engine runs its parts: the engine core and its one worker in the runner's
own process ("in-process", the default of `conftest.clean_env`), or vLLM's production layout
(an engine-core process and a worker process, each importing vLLM and torch anew).

One engine start on this 2-core host: 44 s in the production layout (three processes import
vLLM; the worker's shutdown alone waits 5 s), 15-20 s in process. The engine is the same code
either way (vLLM's `InprocClient` runs the same `EngineCore`, the "uni" executor the same
`Worker`); tests that assert something about the processes themselves (the plugin loading in
each, one decision for all) ask for the production layout.

Each pytest-xdist worker binds its engines' OpenMP threads to a core of its own: vLLM's "auto"
binding puts every engine on core 0 and reserves the other, so two workers' engines would share
one core.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

IN_PROCESS = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0"}
"""The env of the in-process layout (vLLM's own switch)."""


def bind_this_worker(environ: dict[str, str] | os._Environ[str] = os.environ) -> None:
    """Under pytest-xdist, `VLLM_CPU_OMP_THREADS_BIND` = the worker's own core (a user's value
    is kept)."""
    worker = environ.get("PYTEST_XDIST_WORKER", "")
    if not worker.startswith("gw") or "VLLM_CPU_OMP_THREADS_BIND" in environ:
        return
    cpus = sorted(os.sched_getaffinity(0))
    environ["VLLM_CPU_OMP_THREADS_BIND"] = str(cpus[int(worker[2:]) % len(cpus)])


def llm_kwargs(kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """`kwargs` for `LLM()`, with the "uni" executor (the worker in this process) in the
    in-process layout where the run has one worker and names no executor."""
    out = dict(kwargs)
    single = out.get("tensor_parallel_size", 1) == 1 and out.get("pipeline_parallel_size", 1) == 1
    if os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING") == "0" and single:
        out.setdefault("distributed_executor_backend", "uni")
    return out

"""The plugin's own cost: import time in a fresh process, `register()`, and time to decide.

`python -m benchmarks plugin_cost [MODEL]` prints the figures as JSON (MODEL: the model the
decision is made for, default SmolLM2-135M-Instruct). Each measurement runs in a fresh
interpreter (`sys.executable`), so module caches from this process never flatter them.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

IMPORT_SNIPPET = """
import time
t = time.perf_counter()
import vllm_specdec_plugin
print(time.perf_counter() - t)
"""

# As in an engine process: vLLM is imported, the entry point runs, then the hook's assemble() for
# an opted-in engine with no preset match (KAITO's fallback), first call and then many more.
ENGINE_SNIPPET = """
import json, sys, time
import vllm.engine.arg_utils
import vllm_specdec_plugin
t = time.perf_counter(); vllm_specdec_plugin.register(); register = time.perf_counter() - t
from argparse import Namespace
from vllm_specdec_plugin.assembly import assemble
environ = {"KAITO_ENABLE_SPECULATIVE_DECODING": "true", "KAITO_ANNOTATIONS_FILE": ""}
engine = Namespace(model=sys.argv[1])
t = time.perf_counter(); decision = assemble(engine, environ, "cpu", None).decision
first = time.perf_counter() - t
times = []
for _ in range(int(sys.argv[2])):
    t = time.perf_counter(); assemble(engine, environ, "cpu", None)
    times.append(time.perf_counter() - t)
print(json.dumps({"register": register, "first": first, "times": times,
                  "source": decision.source}))
"""


def run_snippet(code: str, *args: str, env: Mapping[str, str] | None = None) -> str:
    """The last stdout line of `code` run in a fresh interpreter."""
    done = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                          check=True, env=None if env is None else dict(env), timeout=600)
    return done.stdout.strip().splitlines()[-1]


def import_ms(runs: int) -> dict[str, Any]:
    """Median and spread of the package's import time over `runs` fresh processes."""
    times = [float(run_snippet(IMPORT_SNIPPET)) * 1000 for _ in range(runs)]
    return {"median": statistics.median(times), "min": min(times), "max": max(times),
            "runs": runs}


def engine_cost(model: str, calls: int) -> dict[str, Any]:
    """`register()` with vLLM imported, and `assemble()` (the hook's work): first call, per call."""
    data = json.loads(run_snippet(ENGINE_SNIPPET, model, str(calls)))
    times = sorted(t * 1e6 for t in data["times"])
    return {"register_ms": data["register"] * 1000, "decide": {
        "case": f"opted in, model {Path(model).name!r} -> {data['source']}",
        "first_ms": data["first"] * 1000, "median_us": statistics.median(times),
        "p90_us": times[int(0.9 * (len(times) - 1))], "calls": calls}}


def measure(model: str, import_runs: int = 5, calls: int = 1000) -> dict[str, Any]:
    """All of the plugin's cost figures."""
    return {"import_ms": import_ms(import_runs), **engine_cost(model, calls)}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", nargs="?", default="SmolLM2-135M-Instruct",
                        help="the model name or path to decide for")
    print(json.dumps(measure(parser.parse_args(argv).model), indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

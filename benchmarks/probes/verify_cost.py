"""What a drafted token costs to verify, by batch size: one engine, draft lengths cycled per step.

    python -m benchmarks verify_cost [--rows 1 4 16 32] [--lengths 0 1 2 3 5] [--bursts 3]

Starts one real `LLM()` (SmolLM2-135M float32 by default) whose `custom_class` proposer
(`FixedDraftProposer`, below) drafts a fixed number of tokens for every row, the length cycling
through `--lengths` step by step, and times each step from one `propose` call to the next (the
step that verified what the previous call drafted). The drafts are a token the model does not
emit, so each step verifies `rows x length` tokens and accepts none: what is measured is the
verification's cost, not what drafting buys. Each batch size runs `--bursts` bursts of `rows`
multi-turn prompts (greedy, `--max-tokens`, ignore_eos); cycling the lengths inside one engine
pairs them in time, so the host's drift hits every length alike. Prints, per batch size and
length, the median step time and the extra per drafted token over the no-draft step.

A single-engine measurement, not a paired comparison of two configurations: run it alone on the
host like every benchmark. It checks the adaptive proposer's fitted per-token cost
(`core/step_cost.py`) against a direct measurement.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.lib.engine_setup import start_llm
from benchmarks.lib.workloads import load_workload

REPO = Path(__file__).resolve().parents[2]
CLASS_PATH = "benchmarks.probes.verify_cost.FixedDraftProposer"
ENV_LENGTHS = "VERIFY_COST_LENGTHS"
ENV_OUT = "VERIFY_COST_OUT"
REJECTED_TOKEN = 1
WRITE_EVERY = 20


class FixedDraftProposer:
    """Drafts `ENV_LENGTHS[i % n]` copies of a rejected token for every row at call i, and
    records the gap to the next call under "rows:length" in the JSON file `ENV_OUT`."""

    def __init__(self, vllm_config: Any) -> None:
        self.lengths = [int(x) for x in os.environ.get(ENV_LENGTHS, "0").split(",")]
        self.out = os.environ[ENV_OUT]
        self.calls = 0
        self.last: tuple[float, int, int] | None = None
        self.gaps: dict[str, list[float]] = {}

    def load_model(self, *args: Any, **kwargs: Any) -> None:
        """No model."""

    def propose(self, sampled_token_ids: list[list[int]], *args: Any,
                **kwargs: Any) -> list[list[int]]:
        now = time.perf_counter()
        rows = len(sampled_token_ids)
        if (self.last is not None and self.last[1] == rows
                and all(sampled_token_ids)):  # a decode step of the same rows, no prefill
            self.gaps.setdefault(f"{rows}:{self.last[2]}", []).append(now - self.last[0])
        length = self.lengths[self.calls % len(self.lengths)]
        self.calls += 1
        self.last = (now, rows, length)
        if self.calls % WRITE_EVERY == 0:
            Path(self.out).write_text(json.dumps(self.gaps))
        return [[REJECTED_TOKEN] * length for _ in sampled_token_ids]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[1, 4, 16, 32])
    parser.add_argument("--lengths", type=int, nargs="+", default=[0, 1, 2, 3, 5])
    parser.add_argument("--bursts", type=int, default=3)
    parser.add_argument("--max-tokens", type=int, default=60)
    parser.add_argument("--model", default=None, help="default: the SmolLM2 checkpoint")
    args = parser.parse_args(argv)
    out = Path(tempfile.mkdtemp(prefix="verify-cost-")) / "gaps.json"
    env = {ENV_LENGTHS: ",".join(map(str, args.lengths)), ENV_OUT: str(out),
           # the worker process imports the proposer from this checkout
           "PYTHONPATH": os.pathsep.join(filter(None, (str(REPO), os.environ.get("PYTHONPATH"))))}
    from vllm import SamplingParams

    llm = start_llm(args.model, max(args.rows), in_process=False, env=env, dtype="float32",
                    speculative_config={"method": "custom_class", "model": CLASS_PATH,
                                        "num_speculative_tokens": max(max(args.lengths), 1)})
    prompts = load_workload("multi_turn")["prompts"]
    params = SamplingParams(temperature=0.0, max_tokens=args.max_tokens, ignore_eos=True)
    for rows in args.rows:
        for _ in range(args.bursts):
            llm.chat([p["messages"] for p in prompts[:rows]], params, use_tqdm=False)
    time.sleep(1)
    gaps = json.loads(out.read_text())
    print("rows  drafted/row  steps  median ms  extra ms per drafted token")
    for rows in args.rows:
        base = gaps.get(f"{rows}:0")
        base_ms = 1e3 * statistics.median(base) if base else None
        for length in args.lengths:
            cell = gaps.get(f"{rows}:{length}")
            if not cell:
                continue
            ms = 1e3 * statistics.median(cell)
            extra = ("" if base_ms is None or not length
                     else f"{(ms - base_ms) / (rows * length):.2f}")
            print(f"{rows:4d}  {length:11d}  {len(cell):5d}  {ms:9.1f}  {extra}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Whether a pair of runs at two k reads what each k would do alone: the carry-over of matched text.

    python -m benchmarks carry_over RUN [--out FILE]     (RUN: a bucket_visits result)

The n-gram proposer drafts for a row only inside a matched passage, and a larger k leaves a
passage in fewer steps. So how many rows are mid-passage when a run of steps at one k begins
is set by the k before it: after a smaller k more (a stock the larger k uses up), after a
larger k fewer. A run of a few steps inherits that state, so a switchback of short runs may
favour the larger k in both directions. What does not depend on k is the share of *tokens*
the text emits inside passages (phi, tokens of rows that drafted over all tokens).

Per bucket and (explored k, incumbent k), over each run at one k that has a run of the other
k on both sides (runs: consecutive steps in one bucket at one k, settled steps only: not a
run's first, which verifies the old k's drafts), it reports the mean log ratio of the middle
run's tokens per row-second over its neighbours' pooled (the controller's pair, at run grain):
- `raw`; `burn_in_2`, `burn_in_4`: with each run's first 2 or 4 settled steps left out;
- `at_text_share`: each drafting run priced as the controller prices a block
  (`vllm_specdec_plugin/core/pair_price.py`): at the row mix its own k holds on text of phi,
  pooled over the drafting runs of the three, its time moved by the drafts that mix adds or
  removes at the seconds per drafted token fitted on the run's bucket and k (`draft_costs`),
  where the controller asks its cost model. A k=0 run is priced as it ran; so is a pair whose
  only drafting run is its middle one (phi then is that run's, biased as it is).

No engine: run anywhere. tests/unit/core/test_schedule_control_passages.py checks it on a
synthetic engine with the same carry-over (tests/support/passages.py), against each k's rate
held fixed.
"""

from __future__ import annotations

import json
import statistics
import sys
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

from benchmarks.lib.results import command, write_json
from vllm_specdec_plugin.core.pair_price import Measure, pair_log_ratio

Steps = list[tuple[int, int, float, int]]  # (batch, tokens, seconds, drafted) per settled step


class Run(NamedTuple):
    key: int
    k: int
    steps: Steps


def runs_of(trace: list[list[Any]]) -> list[Run]:
    """The trace cut into runs at one k in one bucket; their settled steps."""
    runs: list[Run] = []
    for batch, k, clean, *_, seconds, tokens, drafted in trace:
        if batch < 1:
            continue
        key = batch.bit_length()
        if not runs or runs[-1].key != key or runs[-1].k != k:
            runs.append(Run(key, k, []))
        elif clean and seconds and seconds > 0:
            runs[-1].steps.append((batch, tokens, seconds, drafted))
    return runs


def draft_costs(runs: list[Run]) -> dict[tuple[int, int], float]:
    """Seconds per drafted token per (bucket, k > 0): least squares of a step's seconds on its
    drafts, the batch's part taken out first where the batch varies (30 steps at least)."""
    from benchmarks.probes.pair_noise import residuals

    steps: dict[tuple[int, int], Steps] = defaultdict(list)
    for run in runs:
        if run.k:
            steps[(run.key, run.k)].extend(run.steps)
    costs = {}
    for where, rows in steps.items():
        batches = [float(b) for b, *_ in rows]
        drafts = residuals([float(d) for *_, d in rows], batches)
        if len(rows) >= 30 and len(set(drafts)) > 1:
            seconds = residuals([s for _, _, s, _ in rows], batches)
            costs[where] = max(statistics.linear_regression(drafts, seconds).slope, 0.0)
    return costs


def sums(steps: Steps, k: int, per_draft: float = 0.0) -> Measure:
    """A run's settled steps as the controller measures a block, per row: yield (tokens /
    batch), time (seconds / batch), drafting share (drafting rows / batch, a row drafting k
    tokens); priced at `per_draft` seconds a drafted token (0: as it ran)."""
    return Measure(sum(t / b for b, t, _, _ in steps), sum(s / b for b, _, s, _ in steps),
                   float(sum(b for b, *_ in steps)), len(steps),
                   sum(d / (k * b) for b, _, _, d in steps) if k else 0.0, per_draft * k)


def carry_over(trace: list[list[Any]]) -> dict[str, Any]:
    """Per bucket and (explored k, incumbent k) with 4 pairs or more: see the module docstring."""
    from vllm_specdec_plugin.core.step_cost import bucket_label

    runs = runs_of(trace)
    costs = draft_costs(runs)
    found: dict[tuple[int, int, int], dict[str, list[float]]] = defaultdict(
        lambda: defaultdict(list))
    for before, middle, after in zip(runs, runs[1:], runs[2:], strict=False):
        if not (before.key == middle.key == after.key and before.k == after.k != middle.k):
            continue
        cell = found[(middle.key, middle.k, before.k)]
        for name, skip in (("raw", 0), ("burn_in_2", 2), ("burn_in_4", 4)):
            three = [sums(run.steps[skip:], run.k) for run in (before, middle, after)]
            if all(m.steps for m in three):
                cell[name].append(pair_log_ratio(three[1], three[0], three[2]))
        three = [sums(run.steps, run.k, costs.get((run.key, run.k), 0.0))
                 for run in (before, middle, after)]
        if all(m.steps for m in three):
            cell["at_text_share"].append(pair_log_ratio(three[1], three[0], three[2]))
    table: dict[str, Any] = {}
    for (key, arm, incumbent), cell in sorted(found.items()):
        if len(cell["raw"]) < 4:
            continue
        row: dict[str, Any] = {"pairs": len(cell["raw"])}
        for name, values in cell.items():
            row[name] = round(statistics.fmean(values), 4)
            row[f"{name}_sd"] = round(statistics.pstdev(values), 4)
        table[f"{bucket_label(key)} k{arm} vs k{incumbent}"] = row
    return {"pairs": table, "draft_seconds_per_token": {
        f"{bucket_label(key)} k{k}": round(cost, 6) for (key, k), cost in sorted(costs.items())}}


def main(argv: Sequence[str] | None = None) -> int:
    from benchmarks.probes.pair_noise import read_run

    run, args = read_run(argv, __doc__.split("\n\n")[0], "carry-over.json")
    out = {"meta": {"kind": "carry-over", "run": args.run,
                    "command": command("carry_over", list(argv or sys.argv[1:]))},
           **carry_over(run["trace"])}
    write_json(Path(args.out), out, indent=1)
    print(json.dumps(out["pairs"], indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Why the schedule controller's pairs spread as they do: a `bucket_visits` run replayed.

    python -m benchmarks pair_noise RUN [--out FILE]     (RUN: a bucket_visits result)

The controller is a pure function of the steps it is given. So the steps a `bucket_visits` run
recorded, replayed into a fresh controller with the engine's prior and k set, decide as the
engine's did. The replay is checked against the run's last incumbent per bucket, and it stops
where they differ.

Per bucket and (explored k, incumbent k), it reports:
- the pairs;
- the mean and spread of what the controller read of them (`pair_gain`: rate differences over
  the incumbent's rate; log ratios in results written before pairs were rate differences);
- how much of that spread the share of rows that drafted explains. The n-gram proposer drafts
  for a row only where its context has a match: a property of the text, whatever the k.

Per bucket and k, it reports how much of a settled step's time its batch explains, and how much
the share of rows that drafted adds.

No engine: run anywhere.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.lib.results import RESULTS_DIR, command, write_json


def recording_controller(meta: dict[str, Any]) -> Any:
    """A `ScheduleController` with the run's prior, k set and parameters that also keeps, per
    pair, what `judge` read of it and the draft shares (drafts / (rows * k)) of its
    exploration block and of its two incumbent neighbours pooled (None at k=0). Pairs are
    read as this code reads them (rate differences), whatever the run's rule was then."""
    from vllm_specdec_plugin.core.schedule_control import ControllerParams, ScheduleController

    # A run recorded before its rule's parameters were: the rule then, every pair as it ran.
    params = ControllerParams(**meta.get("controller_params", {"text_share_from_batch": 0}))

    class Recording(ScheduleController):
        def __init__(self) -> None:
            super().__init__(meta["prior"], meta["k_set"], params,
                             max_graph_tokens=meta.get("max_graph_tokens"))
            self.sums: dict[int, list[float]] = {}  # id(block) -> [drafts, rows * k]
            self.last_incumbent: dict[int, list[float]] = {}
            self.waiting: dict[int, tuple[list[float], list[float]]] = {}
            self.closing: list[float] = [0.0, 0.0]
            self.pairs: list[tuple[int, int, int, float, tuple[float | None, ...]]] = []

        def observe(self, step: Any) -> Any:
            state = self.buckets.get(step[0].bit_length())
            block = state.block if state is not None else None
            counted = block.steps if block is not None else 0
            change = super().observe(step)
            if block is not None and block.steps > counted:  # the step went into this block
                sums = self.sums.setdefault(id(block), [0.0, 0.0])
                sums[0] += step[4]
                sums[1] += step[0] * step[1]
            return change

        def _end_visit(self, state: Any) -> None:
            block = state.block
            super()._end_visit(state)
            self.sums.pop(id(block), None)

        def _close_block(self, state: Any) -> Any:
            block, incumbent, waiting = state.block, state.incumbent, state.pending
            self.closing = self.sums.pop(id(block), [0.0, 0.0])
            change = super()._close_block(state)
            if block.arm == incumbent:
                self.last_incumbent[state.key] = self.closing
            elif state.pending is not None and state.pending is not waiting:
                self.waiting[state.key] = (self.closing,
                                           self.last_incumbent.get(state.key, [0.0, 0.0]))
            return change

        def _paired(self, state: Any, pending: Any, after: Any) -> None:
            estimate, seen = state.arms[pending[0]], []
            judge = estimate.judge

            def recorded(gain: float, *args: Any) -> int:
                seen.append(gain)
                return judge(gain, *args)

            estimate.judge = recorded
            incumbent = state.incumbent
            try:
                super()._paired(state, pending, after)
            finally:
                del estimate.judge
            explored, before = self.waiting.pop(state.key, ([0.0, 0.0], [0.0, 0.0]))
            self.pairs.append((state.key, pending[0], incumbent, seen[0],
                               shares(explored, [before[0] + self.closing[0],
                                                 before[1] + self.closing[1]])))

    return Recording()


def shares(explored: list[float], neighbours: list[float]) -> tuple[float | None, float | None]:
    """(the exploration block's draft share, its neighbours' pooled; None at k=0)."""
    return (explored[0] / explored[1] if explored[1] else None,
            neighbours[0] / neighbours[1] if neighbours[1] else None)


def residuals(values: list[float], xs: list[float]) -> list[float]:
    """`values` less a least-squares line in `xs` (as they are where `xs` does not vary)."""
    if len(set(xs)) < 2:
        return values
    slope, intercept = statistics.linear_regression(xs, values)
    return [v - intercept - slope * x for v, x in zip(values, xs, strict=True)]


def explained(values: list[float], xs: list[float]) -> tuple[float, float]:
    """(sd of `values`, sd left after a least-squares line in `xs`)."""
    return statistics.pstdev(values), statistics.pstdev(residuals(values, xs))


def pair_table(pairs: list[tuple[int, int, int, float, tuple[float | None, ...]]]
               ) -> dict[str, Any]:
    """Per bucket and (explored k, incumbent k): pairs, mean and sd of the pairs' gains, and the
    sd left by a line in the exploration block's draft share, in its neighbours', and in the
    first less the second (a side at k=0 counts 0), where there are four pairs or more; where
    both k draft, that difference's mean and its standard error."""
    from vllm_specdec_plugin.core.step_cost import bucket_label

    groups: dict[tuple[int, int, int], list[tuple[float, tuple[float | None, ...]]]] = (
        defaultdict(list))
    for key, arm, incumbent, gain, xs in pairs:
        groups[(key, arm, incumbent)].append((gain, xs))
    table: dict[str, Any] = {}
    for (key, arm, incumbent), rows in sorted(groups.items()):
        ratios = [r for r, _ in rows]
        cell = {"pairs": len(rows), "mean": round(statistics.fmean(ratios), 4),
                "sd": round(statistics.pstdev(ratios), 4)}
        covariates = {"explored": [xs[0] for _, xs in rows],
                      "incumbent": [xs[1] for _, xs in rows],
                      "difference": [(xs[0] or 0.0) - (xs[1] or 0.0) for _, xs in rows]}
        for name, values in covariates.items():
            if len(rows) >= 4 and None not in values:
                cell[f"sd_left_by_{name}_share"] = round(explained(ratios, values)[1], 4)
        if arm and incumbent and len(rows) >= 4:  # both draft: is their share the same?
            difference = covariates["difference"]
            cell["share_difference"] = round(statistics.fmean(difference), 4)
            cell["share_difference_se"] = round(
                statistics.stdev(difference) / len(difference) ** 0.5, 4)
        table[f"{bucket_label(key)} k{arm} vs k{incumbent}"] = cell
    return table


def step_times(trace: list[list[Any]]) -> dict[str, Any]:
    """Per bucket and k > 0 (at least 40 settled steps): the sd of log seconds left by a line in
    log batch, and by one in log batch and the step's draft share (two variables: the batch's
    part first, then the share's on what is left)."""
    from vllm_specdec_plugin.core.step_cost import bucket_label

    steps: dict[tuple[int, int], list[tuple[int, float, float]]] = defaultdict(list)
    previous = -1
    for batch, k, clean, *_, seconds, _tokens, drafted in trace:
        settled = clean and k == previous
        previous = k if clean else -1
        if settled and batch > 0 and k > 0 and seconds > 0:
            steps[(batch.bit_length(), k)].append((batch, math.log(seconds),
                                                   drafted / (batch * k)))
    table: dict[str, Any] = {}
    for (key, k), rows in sorted(steps.items()):
        if len(rows) < 40:
            continue
        logs = [t for _, t, _ in rows]
        left = residuals(logs, [math.log(b) for b, _, _ in rows])
        by_both = statistics.pstdev(residuals(left, [s for _, _, s in rows]))
        table[f"{bucket_label(key)} k{k}"] = {
            "steps": len(rows), "sd": round(statistics.pstdev(logs), 4),
            "sd_left_by_batch": round(statistics.pstdev(left), 4),
            "sd_left_by_batch_and_draft_share": round(by_both, 4),
            "mean_draft_share": round(statistics.fmean(s for _, _, s in rows), 3)}
    return table


def block_positions(trace: list[list[Any]], most: int = 8) -> dict[str, Any]:
    """Yield per row (tokens / batch) by a step's position in its run of steps at one k in one
    bucket, after a run at which k in the same bucket ("after none": a run that starts a visit).
    Position 0 is the step at the new k (it verifies drafts the old k made); clean steps only,
    positions with five runs or more. A k's yield that falls along its run, where it follows
    a smaller k, is a stock of matched text the smaller k left and the larger one uses up."""
    from vllm_specdec_plugin.core.step_cost import bucket_label

    found: dict[tuple[int, int, int | None], list[list[float]]] = defaultdict(
        lambda: [[] for _ in range(most)])
    key = k = before = None
    position = 0
    for batch, step_k, clean, *_, _seconds, tokens, _drafted in trace:
        if batch < 1:
            continue
        here = batch.bit_length()
        if here != key:
            key, k, before, position = here, step_k, None, 0
        elif step_k != k:
            k, before, position = step_k, k, 0
        else:
            position += 1
        if clean and position < most:
            found[(here, step_k, before)][position].append(tokens / batch)
    table: dict[str, Any] = {}
    for (bucket, arm, after), positions in sorted(found.items(), key=str):
        means = [round(statistics.fmean(v), 3) if len(v) >= 5 else None for v in positions]
        if sum(m is not None for m in means) >= 3:
            previous = "none" if after is None else f"k{after}"
            table[f"{bucket_label(bucket)} k{arm} after {previous}"] = {
                "runs": len(positions[1]), "yield_by_position": means}
    return table


def read_run(argv: Sequence[str] | None, description: str, out: str
             ) -> tuple[dict[str, Any], argparse.Namespace]:
    """The command line of a probe that reads a `bucket_visits` run (RUN, --out): the run, and
    the arguments. Stops where the run has no step seconds (recorded before they were)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("run", help="a bucket_visits result (with seconds, tokens, drafted)")
    parser.add_argument("--out", default=str(RESULTS_DIR / out))
    args = parser.parse_args(argv)
    run: dict[str, Any] = json.loads(Path(args.run).read_text())
    if "seconds" not in run.get("trace_columns", []):
        raise SystemExit(f"{args.run} has no step seconds: record it again with bucket_visits")
    return run, args


def main(argv: Sequence[str] | None = None) -> int:
    from vllm_specdec_plugin.core.schedule_state import Step
    from vllm_specdec_plugin.core.step_cost import bucket_label

    run, args = read_run(argv, __doc__.split("\n\n")[0], "pair-noise.json")
    controller = recording_controller(run["meta"])
    for batch, k, clean, *_, seconds, tokens, drafted in run["trace"]:
        controller.observe(Step(batch, k, seconds, tokens, drafted, clean))
    replayed = {bucket_label(key): state.incumbent for key, state in controller.buckets.items()}
    recorded = {label: b["incumbent"] for label, b in run["buckets"].items() if "incumbent" in b}
    if replayed != recorded:
        raise SystemExit(f"the replay decided otherwise than the run: {replayed} != {recorded}")
    out = {"meta": {"kind": "pair-noise", "command": command("pair_noise",
                                                             list(argv or sys.argv[1:])),
                    "run": args.run, "replay_matches": True},
           "pairs": pair_table(controller.pairs), "step_times": step_times(run["trace"]),
           "block_positions": block_positions(run["trace"])}
    write_json(Path(args.out), out, indent=1)
    print(json.dumps(out["pairs"], indent=1))
    print(json.dumps(out["step_times"], indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

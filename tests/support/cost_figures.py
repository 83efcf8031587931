"""The schedule controller's own cost per step as the docs quote it: `schedule_switchback` cost
runs (`cost_row`) and `controller_cost` loops (`loop_cost`), made into `doc_claims.Claim`s."""

from __future__ import annotations

import re
from collections.abc import Callable

from support.result_tables import result
from support.run_figures import CONTROLLER_PAGE

ClaimRow = tuple[str, str, Callable[[], tuple[str, ...]]]
"""(page, pattern, expected): a `doc_claims.Claim`'s fields."""


def cost_row(name: str) -> tuple[str, ...]:
    """A schedule_switchback cost run, the controller alone: the engine thread's µs per step
    at each cell's batch, then the decision thread's where it had one."""
    cells = [c["cost_us_per_step"]["controller_alone"] for c in sorted(
        result(name)["cells"], key=lambda c: c["concurrency"])]
    out = tuple(f"{c['per_step_path']:.1f}" for c in cells)
    if "decision_thread" in cells[0]:
        out += tuple(f"{c['decision_thread']:.1f}" for c in cells)
    return out


TRIPLE = r"([\d.]+) / ([\d.]+) / ([\d.]+)"


def cost_claim(lead: str, name: str, bold: bool = False, thread: bool = True) -> ClaimRow:
    """A row of docs/schedule-controller.md's cost table: `lead` (a regex), the row's result
    file, the engine thread's three figures (bold in the kept design's row), then the decision
    thread's three or "none"."""
    engine = rf"\*\*{TRIPLE}\*\*" if bold else TRIPLE
    pattern = (rf"{lead} \(\[`{re.escape(name)}\.json`\]\S+\) \| {engine} \| "
               rf"{TRIPLE if thread else 'none'} \|")
    return CONTROLLER_PAGE, pattern, lambda: cost_row(name)


def loop_cost(name: str, way: str = "stats") -> tuple[str, ...]:
    return tuple(f"{c[f'{way}_median_us']:.2f}" for c in sorted(
        result(name)["cells"], key=lambda c: c["batch"]))


COST_CLAIMS: list[ClaimRow] = [
    cost_claim(r"counted from its emitted tokens, a021514", "schedule-cost", bold=True),
    cost_claim(r"without the emitted-token count, d94adda", "schedule-cost-d94adda"),
    cost_claim(r"counts by the walk", "schedule-cost-no-log-stats"),
    cost_claim(r"counts in a helper, 5176e03", "schedule-cost-5176e03"),
    cost_claim(r"counts by the walk", "schedule-cost-no-log-stats-5176e03"),
    cost_claim(r"4d61faf", "schedule-cost-inline", thread=False),
    cost_claim(r"`queue\.SimpleQueue`", "schedule-cost-queue"),
    (CONTROLLER_PAGE, r"walk on the engine thread from an earlier run "
     r"\(([\d.]+) / ([\d.]+) / ([\d.]+);",
     lambda: cost_row("schedule-cost-inline-no-log-stats")),
    (CONTROLLER_PAGE, r"the engine thread's path ([\d.]+), ([\d.]+) and ([\d.]+) µs per "
     r"step at batch 1, 32 and 256 from the stats \(([\d.]+), ([\d.]+) and ([\d.]+) "
     r"with the walk\)",
     lambda: loop_cost("controller-cost") + loop_cost("controller-cost", "walk")),
    (CONTROLLER_PAGE, r"at 5176e03 it was ([\d.]+), ([\d.]+) and ([\d.]+)",
     lambda: loop_cost("controller-cost-5176e03")),
    (CONTROLLER_PAGE, r"The decision thread's ([\d.]+)-([\d.]+) µs a step",
     lambda: (min(cost_row("schedule-cost")[3:], key=float),
              max(cost_row("schedule-cost")[3:], key=float))),
    (CONTROLLER_PAGE, r"with everything on the engine thread ([\d.]+), "
     r"([\d.]+) and ([\d.]+)", lambda: loop_cost("controller-cost-inline")),
    ("README.md", r"engine thread, ([\d.]+)-([\d.]+) µs at batch 1-256 \(counting from "
     r"vLLM's spec-decoding stats; its decisions on a thread of their own, "
     r"([\d.]+)-([\d.]+) µs there",
     lambda: (min(cost_row("schedule-cost")[:3], key=float),
              max(cost_row("schedule-cost")[:3], key=float),
              min(cost_row("schedule-cost")[3:], key=float),
              max(cost_row("schedule-cost")[3:], key=float))),
    ("README.md", r"([\d.]+)-([\d.]+) µs with the decisions on the engine thread too",
     lambda: (min(cost_row("schedule-cost-inline"), key=float),
              max(cost_row("schedule-cost-inline"), key=float))),
]

STEADY = ("schedule-cost-steady-135fd4e", "schedule-cost-steady",
          "schedule-cost-steady-no-log-stats-135fd4e", "schedule-cost-steady-no-log-stats")


def at_256(cells: list[dict]) -> dict:
    """A cost run's cell at batch 256, the controller alone: its µs per step and, in the
    runs with requests ending at most steps, requests ended per step."""
    cell = next(c for c in cells if c["concurrency"] == 256)
    alone = cell.get("requests_ended_per_step", {}).get("controller_alone")
    return {**cell["cost_us_per_step"]["controller_alone"], "ended": alone}


def ended_range(runs: list[list[dict]]) -> tuple[str, str]:
    """Requests ended per step at batch 256 over `runs` (each a run's cells), lowest and
    highest."""
    ends = [at_256(cells)["ended"] for cells in runs]
    return f"{min(ends):.3f}", f"{max(ends):.3f}"


def steady_ends() -> tuple[str, str]:
    return ended_range([result(name)["cells"] for name in STEADY])


def steady_lengths() -> tuple[str, str, str]:
    from benchmarks.lib.workloads import uniform_range

    tokens = {result(name)["meta"]["tokens_per_request"] for name in STEADY}
    (mean,) = tokens
    return (*(str(n) for n in uniform_range(mean)), str(mean))


COST_CLAIMS += [
    cost_claim(r"rows counted on the engine thread, a queue, 135fd4e", STEADY[0]),
    cost_claim(r"rows counted on the decision thread, a queue", STEADY[1], bold=True),
    cost_claim(r"a queue, by the walk, 135fd4e", STEADY[2]),
    cost_claim(r"a queue, by the walk", STEADY[3]),
    (CONTROLLER_PAGE, r"\(`--steady`: ([\d.]+) to ([\d.]+) requests ended per step at 256",
     steady_ends),
    (CONTROLLER_PAGE, r"lengths drawn per request \((\d+) to (\d+) tokens, mean (\d+)\), as a "
     r"queue", steady_lengths),
]


def draining(batch: int, design: str = "") -> tuple[str, ...]:
    """The draining runs' engine-thread µs per step at `batch`, per design, in round order."""
    runs = result("schedule-cost-draining")["runs"]
    return tuple(f"{c['cost_us_per_step']['controller_alone']['per_step_path']:.1f}"
                 for run in runs if run["design"].endswith(design) for c in run["cells"]
                 if c["concurrency"] == batch)


def draining_ends() -> tuple[str, str]:
    return ended_range([run["cells"] for run in result("schedule-cost-draining")["runs"]])


def decision_rise() -> tuple[str, str]:
    """How much the decision thread's µs per step at 256 rose with the rows handed over."""
    def rise(before: list[dict], after: list[dict]) -> float:
        return float(at_256(after)["decision_thread"] - at_256(before)["decision_thread"])

    rises = [rise(result(before)["cells"], result(after)["cells"])
             for before, after in (STEADY[:2], STEADY[2:])]
    runs = result("schedule-cost-draining")["runs"]
    rises += [rise(runs[i]["cells"], runs[i + 1]["cells"]) for i in (0, 2)]
    return f"{min(rises):.0f}", f"{max(rises):.0f}"


def steady_noise() -> tuple[str, ...]:
    before, after = (cost_row(name) for name in STEADY[:2])
    walk_before, walk_after = (cost_row(name) for name in STEADY[2:])
    return (f"{abs(float(after[0]) - float(before[0])):.1f}", before[2], after[2],
            walk_before[2], walk_after[2])


COST_CLAIMS += [
    (CONTROLLER_PAGE, r"where ([\d.]+) to ([\d.]+) requests ended per step at 256 and most such",
     draining_ends),
    (CONTROLLER_PAGE, r"path at 256 read ([\d.]+) and ([\d.]+) µs with the rows counted on it, "
     r"([\d.]+) and ([\d.]+) µs with them handed over \(at 32: ([\d.]+) and ([\d.]+), ([\d.]+) "
     r"and ([\d.]+)\)",
     lambda: (*draining(256, "(135fd4e)"), *draining(256, "decision thread"),
              *draining(32, "(135fd4e)"), *draining(32, "decision thread"))),
    (CONTROLLER_PAGE, r"at 256 its time rose by (\d+) to (\d+) µs a step", decision_rise),
    (CONTROLLER_PAGE, r"moved by ([\d.]+) µs between the two runs: the runs' noise, so the "
     r"queue's ([\d.]+) against ([\d.]+) at 256 .*? the walk rows' drop \(([\d.]+) to "
     r"([\d.]+) at 256\)", steady_noise),
    (CONTROLLER_PAGE, r"in each traffic measured: ([\d.]+) µs where few requests end, ([\d.]+) "
     r"µs as a queue where about one ends a step, ([\d.]+) and ([\d.]+) µs in draining batches "
     r"where their rows are counted \(([\d.]+) and ([\d.]+) µs before, .*? ([\d.]+) µs as a "
     r"queue at 256, ([\d.]+) µs when the rows were counted there too",
     lambda: (cost_row("schedule-cost")[2], cost_row(STEADY[1])[2],
              *draining(256, "decision thread"), *draining(256, "(135fd4e)"),
              cost_row(STEADY[3])[2], cost_row("schedule-cost-no-log-stats")[2])),
]
COST_CLAIMS.append(
    ("README.md", r"now that such a step's rows are counted on the decision thread: ([\d.]+) "
     r"µs as a queue, ([\d.]+)-([\d.]+) µs in draining batches, against ([\d.]+)-([\d.]+) µs "
     r"when",
     lambda: (cost_row(STEADY[1])[2], *sorted(draining(256, "decision thread"), key=float),
              *sorted(draining(256, "(135fd4e)"), key=float))))

"""The figures of "A false alarm ends at the first look that says so" and "c=1 with a false
alarm's gap kept" in docs/schedule-controller.md, each computed from its result files or the
parameters (`support/doc_claims.py` checks them against the page)."""

from __future__ import annotations

import statistics
from collections.abc import Callable
from statistics import NormalDist

from support.paced_figures import LEVEL_C1
from support.result_tables import RUN_PAIRS_MARGIN, result
from support.run_figures import CONTROLLER_PAGE, cell_of, controller_cells
from support.stepped_figures import aa, best, cell_entry, met, priced_share
from vllm_specdec_plugin.core.schedule_params import CONTROLLER_DEFAULTS

HELD_C1 = "controller-runs-steady-c1-held"
"""c=1 with a false alarm's gap kept (6bd4e7c), on this session's host."""


def step_ms(name: str) -> tuple[str, ...]:
    """The fixed arms' median decode step in ms (no prompt chunk) over the run's four
    workloads: k=0's, then k=2's and k=5's steps that verify drafts."""
    cells = result(f"{name}.steps")["cells"][:4]
    out = []
    for arm in ("k0", "k2", "k5"):
        seconds = [step[3] for cell in cells for group in cell["steps"]
                   for step in group[arm]["steps"] if step[2] == 0 and (step[1] or arm == "k0")]
        out.append(f"{1000 * statistics.median(seconds):.1f}")
    return tuple(out)


def warm_steps(name: str) -> tuple[str, str]:
    """The fewest and most controller steps in one cell's warm-up."""
    counts = [sum(len(run["controller"]["steps"]) for run in cell["warmup_steps"])
              for cell in result(f"{name}.steps")["cells"][:4]]
    return str(min(counts)), str(max(counts))


def percent_range(shares: list[float]) -> tuple[str, str]:
    """The least and most of `shares`, in whole percent."""
    return f"{100 * min(shares):.0f}", f"{100 * max(shares):.0f}"


def explored_range(name: str) -> tuple[str, str]:
    """The least and most share of bucket 1-1's steps explored over the run's cells."""
    return percent_range([cell["explore_share"]["1-1"] for cell in controller_cells(name)])


def meets(name: str, workload: str) -> str:
    """"meets" where the cell's best fixed k, priced, has its interval low at 0.98 or more."""
    entry = best(cell_of(name, workload, 1)["priced"]["against_last"])
    return "meets" if entry["low"] >= RUN_PAIRS_MARGIN else "misses"


def k2_leads(name: str) -> tuple[str, str]:
    """How far fixed k=2 leads fixed k=5, priced, in the cells where it does (least, most)."""
    leads = [100 * (a["k5"]["ratio"] / a["k2"]["ratio"] - 1.0) for cell in controller_cells(name)
             for a in [cell["priced"]["against_last"]] if a["k2"]["ratio"] < a["k5"]["ratio"]]
    return f"{min(leads):.1f}", f"{max(leads):.1f}"


def priced_ratio(name: str, workload: str, concurrency: int, arm: str, digits: int = 3) -> str:
    """A controller cell's priced point for fixed `arm` against the controller."""
    entry = cell_of(name, workload, concurrency)["priced"]["against_last"][arm]
    return f"{entry['ratio']:.{digits}f}"


def k0_ratio(name: str, workload: str) -> str:
    return priced_ratio(name, workload, 1, "k0", 2)


HELD_C4 = "controller-runs-steady-c4-held-input-grounded"
"""input_grounded c=4 on the same host, the run stopped after that cell."""


def c4_pairs() -> tuple[str, str]:
    """The fewest and most pairs k=2 had in a bucket at the cell's end."""
    counts = [arms["k2"] for arms in cell_of(HELD_C4, "input_grounded", 4)["pairs"].values()]
    return str(min(counts)), str(max(counts))


def c4_priced(arm: str, interval: bool) -> str:
    return cell_entry(HELD_C4, "input_grounded", 4, arm, True) if interval \
        else priced_ratio(HELD_C4, "input_grounded", 4, arm)


HELD_CLAIMS: list[tuple[str, str, Callable[[], tuple[str, ...]]]] = [
    (CONTROLLER_PAGE, r"pairs since \(not the one that showed the change\) may win, their mean "
     r"([\d.]+) standard errors up above -2%",
     lambda: (f"{NormalDist().inv_cdf(CONTROLLER_DEFAULTS.pace_level):.3f}",)),
    (CONTROLLER_PAGE, r"the same command's fixed arms take a median ([\d.]+) ms a plain decode "
     r"step, ([\d.]+) ms a step verifying k=2's drafts and ([\d.]+) ms k=5's \(([\d.]+), "
     r"([\d.]+) and ([\d.]+) ms in the ca71b19 run",
     lambda: (*step_ms(HELD_C1), *step_ms(LEVEL_C1))),
    (CONTROLLER_PAGE, r"k=5 against k=0 at multi_turn ([\d.]+)x priced \(([\d.]+)x there\), and "
     r"k=2 leads k=5 by ([\d.]+)-([\d.]+)% in three cells",
     lambda: (k0_ratio(HELD_C1, "multi_turn"), k0_ratio(LEVEL_C1, "multi_turn"),
              *k2_leads(HELD_C1))),
    (CONTROLLER_PAGE, r"The 120 s warm-up holds (\d+)-(\d+) of the controller's steps per cell "
     r"\((\d+)-(\d+) there\)",
     lambda: (*warm_steps(HELD_C1), *warm_steps(LEVEL_C1))),
    (CONTROLLER_PAGE, r"By the priced figures \*\*(\d) of (\d) cells met\*\*, by the timed ones "
     r"(\d) of (\d)\. input_grounded meets, (\S+ \[\S+ \S+\]) of fixed k=5 \((\S+ \[\S+ \S+\]) "
     r"in the ca71b19 run\)",
     lambda: (*met((HELD_C1,), True), *met((HELD_C1,), False),
              cell_entry(HELD_C1, "input_grounded", 1, "k5", True),
              cell_entry(LEVEL_C1, "input_grounded", 1, "k5", True))),
    (CONTROLLER_PAGE, r"k=2 / controller priced (\S+) there\), and the controller spent (\d+)% "
     r"of its priced seconds at k=2",
     lambda: (priced_ratio(HELD_C1, "input_grounded", 1, "k2"),
              priced_share(HELD_C1, "input_grounded", 1, "k2"))),
    (CONTROLLER_PAGE, r"open_ended (\S+ \[\S+ \S+\]), mt_bench (\S+ \[\S+ \S+\]), multi_turn "
     r"(\S+ \[\S+ \S+\])\. The controller's table stayed at the prior k=5 in (\w+) cell",
     lambda: (*(cell_entry(HELD_C1, w, 1, "k2", True)
                for w in ("open_ended", "mt_bench", "multi_turn")),
              "every" if all(not any(c["switches"].values()) for c in controller_cells(HELD_C1))
              else "not every")),
    (CONTROLLER_PAGE, r"Explored (\d+)-(\d+)% of the bucket's steps \((\d+)-(\d+)% in the ca71b19 "
     r"run\)", lambda: (*explored_range(HELD_C1), *explored_range(LEVEL_C1))),
    (CONTROLLER_PAGE, r"\*\*The A/A\*\*, the controller against itself at open_ended on this "
     r"host: timed (\S+ \[\S+ \S+\]), priced (\S+ \[\S+ \S+\])\.", lambda: aa(HELD_C1)),
    ("README.md", r"At c=1 again, on a host where a drafted token costs about half a plain step "
     r"\(AVX2, no AVX-512\), (\d) of (\d) cells meet it priced: input_grounded (\w+); the "
     r"three misses are against fixed k=2, which leads the prior k=5 by ([\d.]+)% or less there",
     lambda: (*met((HELD_C1,), True), meets(HELD_C1, "input_grounded"), k2_leads(HELD_C1)[1])),
    (CONTROLLER_PAGE, r"A clear miss: fixed k=2 against the controller (\S+ \[\S+ \S+\]) priced\. "
     r"On this host k=5 loses to k=0 here \(fixed k=5 / controller (\S+), k=0 / controller "
     r"(\S+)\) and k=2 leads both\. Every bucket stayed at the prior k=5 with k=2 at (\d+)-(\d+) "
     r"pairs",
     lambda: (c4_priced("k2", True), c4_priced("k5", False), c4_priced("k0", False),
              *c4_pairs())),
    (CONTROLLER_PAGE, r"the controller explored (\d+)-(\d+)% of their steps, still learning",
     lambda: percent_range(list(cell_of(HELD_C4, "input_grounded", 4)["explore_share"].values()))),
    (CONTROLLER_PAGE, r"Against no speculation the controller holds: k=0 / controller (\S+ "
     r"\[\S+ \S+\]) priced\. No A/A was run on this host at c=4 \(the c=1 one above: priced "
     r"(\S+ \[\S+ \S+\])\)", lambda: (c4_priced("k0", True), aa(HELD_C1)[1])),
]

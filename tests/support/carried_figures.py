"""The figures of "input_grounded c=4 with each arm's pace kept over a switch" in
docs/schedule-controller.md, each computed from its result file (`support/doc_claims.py`
checks them against the page)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from itertools import pairwise

from support.counted_figures import COUNTED_C4
from support.result_tables import result
from support.run_figures import CONTROLLER_PAGE, aa_cell, cell_of
from support.stepped_figures import aa, cell_entry, priced_share
from vllm_specdec_plugin.core.arm_stats import t_quantile
from vllm_specdec_plugin.core.schedule_params import CONTROLLER_DEFAULTS

CARRIED_C4 = "controller-runs-steady-c4-carried"
"""input_grounded c=4 with afb6c65, and its A/A cell."""


def switch_step(cell: dict) -> str:
    """Bucket 2-3's one switch's measured step."""
    (step, _), = cell["history"]["2-3"]
    return str(step)


def after_switch(name: str) -> tuple[str, ...]:
    """The A/A controller's 2-3 after its switch: its explored share, its pairs of k=0 and
    k=5; the same for the 468684a cell's controller; its priced share at k=2."""
    found = []
    for cell in (aa_cell(name), cell_of(COUNTED_C4, "input_grounded", 4)):
        found += [f"{100 * cell['explore_share']['2-3']:.0f}",
                  *(str(cell["pairs"]["2-3"][k]) for k in ("k0", "k5"))]
    share = aa_cell(name)["priced"]["controller_priced_share_by_k"]["k2"]
    return (*found, f"{100 * share:.0f}")


AGAIN_C4 = "controller-runs-steady-c4-carried-2"
"""The same command run again at once with eb60b94 (each arm's estimate reported)."""


def implied_spread(found: dict) -> float:
    """One pair's spread implied by a reported estimate (gain, low, n_eff): the bound's
    distance below the mean over t(1 - alpha, n_eff - 1), times the root of n_eff."""
    half = found["gain"] - found["low"]
    df = found["n_eff"] - 1.0
    return half / t_quantile(1.0 - CONTROLLER_DEFAULTS.alpha, df) * math.sqrt(found["n_eff"])


def stuck_k2() -> tuple[str, ...]:
    """2-3's k=2 estimate at the end of the controller cell: its mean gain (%), the fixed
    arms' lead of k=2 over k=5 (%), the switch's bound (%), n_eff, the bound's distance
    below the mean (points) and the one-pair spread it implies."""
    cell = cell_of(AGAIN_C4, "input_grounded", 4)
    found = cell["estimates"]["2-3"]["k2"]
    against = cell["priced"]["against_last"]
    half = found["gain"] - found["low"]
    spread = implied_spread(found)
    lead = against["k5"]["ratio"] / against["k2"]["ratio"] - 1.0
    return (f"{100 * found['gain']:.1f}", f"{100 * lead:.1f}",
            f"{100 * found['low']:.1f}", f"{found['n_eff']:.1f}", f"{100 * half:.1f}",
            f"{spread:.2f}")


def steps_2_3(name: str) -> tuple[str, str]:
    """2-3's steps run by the controller over warm-up and run: the A/A cell's, the
    controller cell's (the run's steps file)."""
    steps = result(f"{name}.steps")["cells"]
    counts = []
    for cell in reversed(steps):  # the A/A cell is the run's last
        counts.append(str(sum(1 for part in ("warmup_steps", "steps") for run in cell[part]
                              for arm, taken in run.items() if arm.startswith("controller")
                              for step in taken["steps"] if 2 <= step[0] <= 3)))
    return counts[0], counts[1]


def controller_runs(name: str) -> list[list[list[float]]]:
    """The controller cell's measured controller runs from the run's steps file, each a list
    of `[rows, drafted, prefill, seconds, k]`."""
    cell = result(f"{name}.steps")["cells"][0]
    return [run["steps"] for group in cell["steps"] for arm, run in group.items()
            if arm.startswith("controller")]


def steady_steps(name: str) -> str:
    """The largest coefficient of variation of step time (%) over the controller cell's
    groups of 30 or more prefill-free steps of one arm, batch size (2-4) and drafted count."""
    cell = result(f"{name}.steps")["cells"][0]
    groups: dict[tuple[str, int, int], list[float]] = {}
    for group in cell["steps"]:
        for arm, run in group.items():
            for rows, drafted, prefill, seconds, _ in run["steps"]:
                if not prefill and 2 <= rows <= 4:
                    groups.setdefault((arm, rows, drafted), []).append(seconds)
    found = [statistics.pstdev(v) / statistics.fmean(v) for v in groups.values() if len(v) >= 30]
    return f"{100 * max(found):.1f}"


def visits(name: str) -> list[list[float]]:
    """The controller's measured runs of consecutive steps at batch 2-3, as their batch
    sizes."""
    found: list[list[float]] = []
    for steps in controller_runs(name):
        visit: list[float] = []
        for step in [*steps, [0]]:
            if 2 <= step[0] <= 3:
                visit.append(step[0])
            elif visit:
                found.append(visit)
                visit = []
    return found


def visit_figures(name: str) -> tuple[str, str, str]:
    """The median visit's steps, the visits in which the batch fell from 3 to 2, the
    visits."""
    found = visits(name)
    fell = sum(1 for v in found if any(a == 3 and b == 2 for a, b in pairwise(v)))
    return f"{statistics.median(len(v) for v in found):.1f}", str(fell), str(len(found))


def spread_of(cell: dict, bucket: str, k: str) -> str:
    """One pair's spread implied by an arm's reported estimate."""
    return f"{implied_spread(cell['estimates'][bucket][k]):.2f}"


CARRIED_CLAIMS: list[tuple[str, str, Callable[[], tuple[str, ...]]]] = [
    (CONTROLLER_PAGE, r"A clear miss again, as in the 6bd4e7c cell: fixed k=2 against the "
     r"controller (\S+ \[\S+ \S+\]) priced \((\S+ \[\S+ \S+\]) in the 468684a cell\)",
     lambda: (cell_entry(CARRIED_C4, "input_grounded", 4, "k2", True),
              cell_entry(COUNTED_C4, "input_grounded", 4, "k2", True))),
    (CONTROLLER_PAGE, r"2-3 with (\d+) pairs of k=2 read on one text, and (\d+)% of its priced "
     r"seconds ran at k=5",
     lambda: (str(cell_of(CARRIED_C4, "input_grounded", 4)["counted_pairs"]["2-3"]),
              priced_share(CARRIED_C4, "input_grounded", 4, "k5"))),
    (CONTROLLER_PAGE, r"\*\*The A/A\*\* of this run, the controller against itself on the same "
     r"cell: timed (\S+ \[\S+ \S+\]), priced (\S+ \[\S+ \S+\])\.", lambda: aa(CARRIED_C4)),
    (CONTROLLER_PAGE, r"2-3 to k=2 at its (\d+)rd measured step", lambda: (switch_step(
        aa_cell(CARRIED_C4)),)),
    (CONTROLLER_PAGE, r"after it 2-3 explored (\d+)% of its steps, with (\d+) pairs of k=0 and "
     r"(\d+) of k=5 \(the 468684a cell's controller, paced from the first look after its "
     r"switch: (\d+)%, with (\d+) and (\d+)\), and (\d+)% of its priced seconds ran at k=2",
     lambda: after_switch(CARRIED_C4)),
    (CONTROLLER_PAGE, r"two moved 2-3 to k=2 \(at their (\d+)th and (\d+)rd measured steps\), "
     r"one to k=0 \((\d+)th\), one stayed at k=5",
     lambda: (switch_step(cell_of(COUNTED_C4, "input_grounded", 4)),
              switch_step(aa_cell(CARRIED_C4)), switch_step(aa_cell(COUNTED_C4)))),
    (CONTROLLER_PAGE, r"Again no switch in the controller cell: fixed k=2 against it (\S+ \[\S+ "
     r"\S+\]) priced", lambda: (cell_entry(AGAIN_C4, "input_grounded", 4, "k2", True),)),
    (CONTROLLER_PAGE, r"gave a mean gain of \+([\d.]+)% over k=5 \(the fixed arms: k=2 ([\d.]+)% "
     r"ahead\), but the bound a switch needs \(at 99\.5%, past \+2%\) stood at (-[\d.]+)% with "
     r"n_eff ([\d.]+)\. That bound is ([\d.]+) points below the mean: one pair spreads about "
     r"([\d.]+) here", stuck_k2),
    (CONTROLLER_PAGE, r"the controller against itself on that cell: timed (\S+ \[\S+ \S+\]), "
     r"priced (\S+ \[\S+ \S+\]); its controller moved 2-3 to k=2 at its (\d+)th measured step and "
     r"after that explored (\d+)% of 2-3's steps",
     lambda: (*aa(AGAIN_C4), switch_step(aa_cell(AGAIN_C4)),
              f"{100 * aa_cell(AGAIN_C4)['explore_share']['2-3']:.0f}")),
    (CONTROLLER_PAGE, r"2-3 saw (\d+) steps of the A/A's controller and (\d+) of the controller "
     r"cell's", lambda: steps_2_3(AGAIN_C4)),
    (CONTROLLER_PAGE, r"varies by at most ([\d.]+)% \(coefficient of variation", lambda: (
        steady_steps(AGAIN_C4),)),
    (CONTROLLER_PAGE, r"bucket 1-1's pairs of k=2 and k=5 spread about ([\d.]+), as on the "
     r"synthetic engine", lambda: (spread_of(aa_cell(AGAIN_C4), "1-1", "k2"),)),
    (CONTROLLER_PAGE, r"in visits of a median ([\d.]+) steps \(the controller cell's measured "
     r"runs\), and in (\d+) of its (\d+) visits the batch fell from 3 to 2",
     lambda: visit_figures(AGAIN_C4)),
]

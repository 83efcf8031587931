"""The figures of "Exploration priced by its loss" and "c=1 with explorations priced by their
loss" in docs/schedule-controller.md, each computed from its result files
(`support/doc_claims.py` checks them against the page)."""

from __future__ import annotations

from collections.abc import Callable

from support.run_figures import CONTROLLER_PAGE, cell_of
from support.stepped_figures import (
    PRIOR_C4,
    PRIOR_C16,
    STEPPED_C1,
    aa,
    cell_entry,
    met,
    priced_share,
    settled_at_5,
)
from vllm_specdec_plugin.core.schedule_params import CONTROLLER_DEFAULTS

PACED_C1 = "controller-runs-steady-c1-paced"
"""c=1 with explorations priced by their loss and a CUSUM on the incumbent's blocks (c0cb490)."""
LEVEL_C1 = "controller-runs-steady-c1-level"
"""c=1 with k=0's level read from the incumbent's recent yield (ca71b19)."""
LEVEL_MT16 = "controller-runs-steady-multi-turn-c16-level"
"""multi_turn c=16 with that controller."""
LEVEL_C4 = "controller-runs-steady-c4-level"
"""c=4 with that controller."""
LEVEL = (LEVEL_C1, LEVEL_MT16, LEVEL_C4)


def loss_and_gap(name: str, workload: str, arm: str) -> tuple[str, str]:
    """An arm's loss against the controller by the priced point, in percent, and the blocks
    `explore_cost` sets between its looks at that loss."""
    loss = 1.0 - 1.0 / cell_of(name, workload, 1)["priced"]["against_last"][arm]["ratio"]
    return f"{100 * loss:.0f}", f"{loss / CONTROLLER_DEFAULTS.explore_cost:.0f}"


def same_share(names: tuple[str, ...], workload: str, k: str) -> str:
    """The controller's share of its priced seconds at k, where it is the same (to the
    percent) in every run; else "not the same"."""
    shares = {priced_share(name, workload, 1, k) for name in names}
    return shares.pop() if len(shares) == 1 else "not the same"


def k2_over_k5(name: str, workload: str) -> str:
    """Fixed k=2's priced seconds over fixed k=5's (each against the controller's)."""
    against = cell_of(name, workload, 1)["priced"]["against_last"]
    return f"{against['k2']['ratio'] / against['k5']['ratio']:.2f}"


PACED_CLAIMS: list[tuple[str, str, Callable[[], tuple[str, ...]]]] = [
    (CONTROLLER_PAGE, r"where k=0 loses (\d+)% and k=2 (\d+)% \(priced, in \"c=1, c=4 and "
     r"ShareGPT c=16/32, priced\" below\), both were looked at once in 97 blocks, about 1% of "
     r"the throughput between them; now once in about (\d+) and (\d+)\.",
     lambda: (lambda z, t: (z[0], t[0], z[1], t[1]))(
         loss_and_gap(f"{STEPPED_C1}-repriced", "multi_turn", "k0"),
         loss_and_gap(f"{STEPPED_C1}-repriced", "multi_turn", "k2"))),
    (CONTROLLER_PAGE, r"engine; (\d+)% of the controller's priced seconds at input_grounded c=1 "
     r"in \"c=1 with explorations priced by their loss\" below\)",
     lambda: (priced_share(PACED_C1, "input_grounded", 1, "k0"),)),
    (CONTROLLER_PAGE, r"By the priced figures (\d) of (\d) cells met\. input_grounded missed, "
     r"(\S+ \[\S+ \S+\]) of fixed k=5: the controller spent (\d+)% of its priced seconds at "
     r"k=0",
     lambda: (*met((PACED_C1,), True), cell_entry(PACED_C1, "input_grounded", 1, "k5", True),
              priced_share(PACED_C1, "input_grounded", 1, "k0"))),
    (CONTROLLER_PAGE, r"By the priced figures \*\*(\d) of (\d) cells met\*\*, by the timed ones "
     r"(\d) of (\d) \((\d) of (\d) and (\d) of (\d) in the run of \"c=1, c=4 and ShareGPT "
     r"c=16/32, priced\", before the price\)",
     lambda: (*met((LEVEL_C1,), True), *met((LEVEL_C1,), False), *met((STEPPED_C1,), True),
              *met((STEPPED_C1,), False))),
    (CONTROLLER_PAGE, r"fixed k=5 against the controller priced (\S+ \[\S+ \S+\]) and (\S+ "
     r"\[\S+ \S+\]) \((\S+ \[\S+ \S+\]) and (\S+ \[\S+ \S+\]) before\); multi_turn's "
     r"controller spent (\d+)% of its priced seconds at k=5\.",
     lambda: (*(cell_entry(name, workload, 1, "k5", True) for name in (LEVEL_C1, STEPPED_C1)
                for workload in ("open_ended", "multi_turn")),
              priced_share(LEVEL_C1, "multi_turn", 1, "k5"))),
    (CONTROLLER_PAGE, r"\*\*input_grounded misses\*\*, (\S+ \[\S+ \S+\]): the controller spent "
     r"(\d+)% of its priced seconds at k=2 \((\d+)% in each of the two runs before\), which "
     r"needs ([\d.]+)x fixed k=5's priced seconds there",
     lambda: (cell_entry(LEVEL_C1, "input_grounded", 1, "k5", True),
              priced_share(LEVEL_C1, "input_grounded", 1, "k2"),
              same_share((f"{STEPPED_C1}-repriced", PACED_C1), "input_grounded", "k2"),
              k2_over_k5(LEVEL_C1, "input_grounded"))),
    (CONTROLLER_PAGE, r"k=2's pairs had restarted \((\d+) at the end\)",
     lambda: (str(cell_of(LEVEL_C1, "input_grounded", 1)["pairs"]["1-1"]["k2"]),)),
    (CONTROLLER_PAGE, r"\*\*The A/A\*\*, the controller against itself at open_ended: timed (\S+ "
     r"\[\S+ \S+\]), priced (\S+ \[\S+ \S+\])\.", lambda: aa(LEVEL_C1)),
]
PACED_CLAIMS += [
    (CONTROLLER_PAGE, r"Priced, fixed k=5 against the controller reads (\S+ \[\S+ \S+\]) \((\S+ "
     r"\[\S+ \S+\]) in the run before\): met\. Timed, (\S+ \[\S+ \S+\]): a miss",
     lambda: (cell_entry(LEVEL_MT16, "multi_turn", 16, "k5", True),
              cell_entry(PRIOR_C16, "multi_turn", 16, "k5", True),
              cell_entry(LEVEL_MT16, "multi_turn", 16, "k5", False))),
    (CONTROLLER_PAGE, r"\*\*The A/A\*\*, the controller against itself: timed (\S+ \[\S+ \S+\]), "
     r"priced (\S+ \[\S+ \S+\]), wider than the priced A/A of the runs above; over the run the "
     r"controller's table switched 8-15 (\w+) and 16-31 (\w+)\.",
     lambda: (*aa(LEVEL_MT16), *({1: "once", 2: "twice"}.get(n, f"{n} times") for n in (
         cell_of(LEVEL_MT16, "multi_turn", 16)["switches"][b] for b in ("8-15", "16-31"))))),
]
PACED_CLAIMS += [
    ("README.md", r"at c=1 (\d) of (\d) cells meet it priced and (\d) of (\d) timed \((\d) and "
     r"(\d) before\)",
     lambda: (*met((LEVEL_C1,), True), *met((LEVEL_C1,), False), met((STEPPED_C1,), True)[0],
              met((STEPPED_C1,), False)[0])),
    ("README.md", r"multi_turn at c=16,\s+the one priced miss at c=16/32, now (meets) it priced",
     lambda: ("meets" if met((LEVEL_MT16,), True)[0] == "1" else "misses",)),
]
PACED_CLAIMS += [
    (CONTROLLER_PAGE, r"By the priced figures \*\*(\d) of (\d) cells met\*\* again, by the timed "
     r"ones (\d) of (\d) \((\d) of (\d) and (\d) of (\d) in the run of 26ae345\)",
     lambda: (*met((LEVEL_C4,), True), *met((LEVEL_C4,), False), *met((PRIOR_C4,), True),
              *met((PRIOR_C4,), False))),
    (CONTROLLER_PAGE, r"the prior fix put it\. (\w+) cell ended with 4-7 at k=5, no switch\.",
     lambda: (settled_at_5(LEVEL_C4),)),
    (CONTROLLER_PAGE, r"\*\*The A/A\*\*, the controller against itself at open_ended c=4: timed "
     r"(\S+ \[\S+ \S+\]), priced (\S+ \[\S+ \S+\])\.", lambda: aa(LEVEL_C4)),
    (CONTROLLER_PAGE, r"this controller meets the target in (\d) of (\d) cells run; the miss is "
     r"input_grounded at c=1\.", lambda: met(LEVEL, True)),
]
PACED_CLAIMS.append(
    (CONTROLLER_PAGE, r"explored no more often than once in L / ([\d.]+)% incumbent blocks "
     r"\(`explore_cost`\), L the loss its upper bound at (\d+)% is sure of, up to (\d+) blocks",
     lambda: (f"{100 * CONTROLLER_DEFAULTS.explore_cost:g}",
              f"{100 * CONTROLLER_DEFAULTS.pace_level:g}",
              str(CONTROLLER_DEFAULTS.explore_every_rarest))))

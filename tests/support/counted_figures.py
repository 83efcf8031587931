"""The figures of "input_grounded c=4 with two drafting k read on one text" and "c=1 with two
drafting k read on one text" in docs/schedule-controller.md and the README's sentence on the
first, each computed from its result file (`support/doc_claims.py` checks them against the
page)."""

from __future__ import annotations

from collections.abc import Callable

from support import run_figures
from support.held_figures import HELD_C1, HELD_C4, percent_range
from support.result_tables import RUN_PAIRS_MARGIN
from support.run_figures import CONTROLLER_PAGE, cell_of
from support.stepped_figures import aa, cell_entry, met, priced_share

COUNTED_C4 = "controller-runs-steady-c4-counted"
"""input_grounded c=4 with 468684a, and its A/A cell."""


def c4_cell(aa_cell: bool = False) -> dict:
    """The run's controller cell, or its A/A cell (the controller against itself)."""
    if aa_cell:
        return run_figures.aa_cell(COUNTED_C4)
    return cell_of(COUNTED_C4, "input_grounded", 4)


def switched_at(aa_cell: bool) -> tuple[str, str]:
    """Bucket 2-3's one switch: the measured step it came at, and the new k."""
    (step, k), = c4_cell(aa_cell)["history"]["2-3"]
    return str(k), str(step)


def shares(aa_cell: bool, *ks: str) -> tuple[str, ...]:
    """The controller's share of its priced seconds at each k, in whole percent."""
    found = c4_cell(aa_cell)["priced"]["controller_priced_share_by_k"]
    return tuple(f"{100 * found[k]:.0f}" for k in ks)


def lead(over: str, under: str) -> str:
    """How far fixed `over` leads fixed `under`, priced, in percent (one decimal), from
    each one's ratio against the controller."""
    against = c4_cell()["priced"]["against_last"]
    return f"{100 * (against[under]['ratio'] / against[over]['ratio'] - 1.0):.1f}"


def short() -> str:
    """Points by which fixed k=2 / controller's priced interval low falls short of 0.98."""
    low = c4_cell()["priced"]["against_last"]["k2"]["low"]
    return f"{100 * (RUN_PAIRS_MARGIN - low):.1f}"


def priced(arm: str) -> str:
    return f"{c4_cell()['priced']['against_last'][arm]['ratio']:.3f}"


COUNTED_C1 = "controller-runs-steady-c1-counted"
"""c=1 with fa01a43, on the same host."""


def c1_counted_pairs() -> tuple[str, ...]:
    """Bucket 1-1's pairs read on one text, per cell in file order."""
    return tuple(str(cell_of(COUNTED_C1, w, 1)["counted_pairs"]["1-1"])
                 for w in ("input_grounded", "open_ended", "mt_bench", "multi_turn"))


def slower(name: str) -> str:
    """How much slower the controller ran than fixed k=0 at open_ended c=1, priced (%)."""
    ratio = cell_of(name, "open_ended", 1)["priced"]["against_last"]["k0"]["ratio"]
    return f"{100 * (1.0 - ratio):.1f}"


COUNTED_CLAIMS: list[tuple[str, str, Callable[[], tuple[str, ...]]]] = [
    (CONTROLLER_PAGE, r"Fixed k=2 against the controller reads (\S+ \[\S+ \S+\]) priced \((\S+ "
     r"\[\S+ \S+\]) in the 6bd4e7c cell\): still a miss, by ([\d.]+) points",
     lambda: (cell_entry(COUNTED_C4, "input_grounded", 4, "k2", True),
              cell_entry(HELD_C4, "input_grounded", 4, "k2", True), short())),
    (CONTROLLER_PAGE, r"Bucket 2-3 moved to k=(\d) at its (\d+)th measured step \(in the warm-up\)",
     lambda: switched_at(False)),
    (CONTROLLER_PAGE, r"the controller spent (\d+)% of its priced seconds at k=2, (\d+)% at k=0 "
     r"and (\d+)% at k=5\. The pairs read on one text: (\d+), (\d+) and (\d+) in 1-1, 2-3 and "
     r"4-7", lambda: (*shares(False, "k2", "k0", "k5"),
                      *(str(c4_cell()["counted_pairs"][b]) for b in ("1-1", "2-3", "4-7")))),
    (CONTROLLER_PAGE, r"the controller is ahead: (\S+) and (\S+) priced\.",
     lambda: (priced("k5"), priced("k0"))),
    (CONTROLLER_PAGE, r"Explored (\d+)-(\d+)% of the buckets' steps \((\d+)-(\d+)% in the 6bd4e7c "
     r"cell\)", lambda: (*percent_range(list(c4_cell()["explore_share"].values())),
                         *percent_range(list(cell_of(HELD_C4, "input_grounded", 4)[
                             "explore_share"].values())))),
    (CONTROLLER_PAGE, r"the controller against itself at input_grounded c=4: timed (\S+ \[\S+ "
     r"\S+\]), priced (\S+ \[\S+ \S+\])\.", lambda: aa(COUNTED_C4)),
    (CONTROLLER_PAGE, r"2-3 moved to k=(\d) at its (\d+)th measured step \(k=0 leads the prior "
     r"k=5 here by ([\d.]+)% priced\), 4-7 followed, and (\d+)% of its priced seconds ran at "
     r"k=0, which fixed k=2 leads by about ([\d.]+)%",
     lambda: (*switched_at(True), lead("k0", "k5"), *shares(True, "k0"), lead("k2", "k0"))),
    ("README.md", r"fixed k=2 against the controller rose from (\S+ \[\S+ \S+\]) to (\S+ "
     r"\[\S+ \S+\]) priced, ([\d.]+) points short of the target",
     lambda: (cell_entry(HELD_C4, "input_grounded", 4, "k2", True),
              cell_entry(COUNTED_C4, "input_grounded", 4, "k2", True), short())),
    (CONTROLLER_PAGE, r"By the priced figures \*\*(\d) of (\d) cells met\*\*, by the timed ones "
     r"(\d) of (\d) \((\d) and (\d) of 4 in the 6bd4e7c run\)",
     lambda: (*met((COUNTED_C1,), True), *met((COUNTED_C1,), False),
              met((HELD_C1,), True)[0], met((HELD_C1,), False)[0])),
    (CONTROLLER_PAGE, r"open_ended (\S+ \[\S+ \S+\]) and mt_bench (\S+ \[\S+ \S+\]) priced\.",
     lambda: tuple(cell_entry(COUNTED_C1, w, 1, "k2", True) for w in ("open_ended", "mt_bench"))),
    (CONTROLLER_PAGE, r"The pairs of k=2 and k=5 were read on one text: (\d+), (\d+), (\d+) and "
     r"(\d+) in the four cells", c1_counted_pairs),
    (CONTROLLER_PAGE, r"At mt_bench k=2 was looked at most \((\d+)% of the steps explored, (\d+)% "
     r"of the controller's priced seconds at k=2\)",
     lambda: (f"{100 * cell_of(COUNTED_C1, 'mt_bench', 1)['explore_share']['1-1']:.0f}",
              priced_share(COUNTED_C1, "mt_bench", 1, "k2"))),
    (CONTROLLER_PAGE, r"Against no speculation open_ended reads (\S+ \[\S+ \S+\]) priced \(k=0 / "
     r"controller: the controller ([\d.]+)% slower\), as in the 6bd4e7c run \((\S+ \[\S+ "
     r"\S+\])\)", lambda: (cell_entry(COUNTED_C1, "open_ended", 1, "k0", True), slower(COUNTED_C1),
                          cell_entry(HELD_C1, "open_ended", 1, "k0", True))),
    (CONTROLLER_PAGE, r"the controller spends (\d+)% of its priced seconds at k=0 and the rest "
     r"drafting", lambda: (priced_share(COUNTED_C1, "open_ended", 1, "k0"),)),
    (CONTROLLER_PAGE, r"\*\*The A/A\*\* of this run, the controller against itself at open_ended: "
     r"timed (\S+ \[\S+ \S+\]), priced (\S+ \[\S+ \S+\])\.", lambda: aa(COUNTED_C1)),
]

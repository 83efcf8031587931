"""The figures of "Why 2-3's pairs spread: the cell replayed pair by pair" in
docs/schedule-controller.md, each computed from its result files (`support/doc_claims.py`
checks them against the page); the bucket's shape from a replay file made with its fit."""

from __future__ import annotations

import statistics
from collections.abc import Callable

from support.carried_figures import AGAIN_C4, CARRIED_C4, switch_step
from support.result_tables import result
from support.run_figures import CONTROLLER_PAGE, aa_cell, cell_of
from support.stepped_figures import aa, cell_entry

THIRD_C4 = "controller-runs-steady-c4-carried-3"
"""input_grounded c=4 a third time, the controller's steps recorded (752b961)."""
REPLAY = f"{THIRD_C4}-replay"
REFIT = f"{THIRD_C4}-refit-replay"
"""The same steps replayed with the batch shape fitted from every step (dcc22c5), at 8a2b4ce,
before the drafted token took the fit's price."""


def by_kind(cells: list[dict]) -> list[dict]:
    """A run's (or its replay's) cells: the controller cell first, then the A/A."""
    return sorted(cells, key=lambda c: len(set(c["arms"])) == 1)


def stuck() -> tuple[str, str]:
    """2-3's k=2 estimate at the end of the controller cell: its gain and the switch's bound,
    in percent."""
    found = cell_of(THIRD_C4, "input_grounded", 4)["estimates"]["2-3"]["k2"]
    return f"{100 * found['gain']:.1f}", f"{100 * found['low']:.1f}"


def exacts(name: str) -> tuple[bool, bool]:
    """Whether each replay (of replay file `name`) ended where its run did: the controller
    cell's, the A/A's."""
    controller, aa_replay = by_kind(result(name)["cells"])
    return controller["replay_exact"], aa_replay["replay_exact"]


def exact() -> tuple[str, str]:
    """The A/A cell's replay, the controller cell's, in words."""
    controller, aa_replay = exacts(REPLAY)
    return ("ends exactly" if aa_replay else "does not end",
            "does not" if not controller else "does too")


def batch_ratios(name: str) -> tuple[str, str]:
    """2-3's fitted batch-3 step over its batch-2 step at the end of each replay in replay file
    `name` (made by the code it names): the controller cell's, the A/A's."""
    return tuple(f"{cell['prices']['2-3']['batch_ratio']:.2f}"  # type: ignore[return-value]
                 for cell in by_kind(result(name)["cells"]))


def plain_steps() -> tuple[str, str, str]:
    """The fixed k=0 arm's median plain step at batch 3 over batch 2, and each in ms."""
    cell = result(f"{THIRD_C4}.steps")["cells"][0]
    seconds: dict[int, list[float]] = {2: [], 3: []}
    for group in cell["steps"]:
        for rows, drafted, prefill, step, _ in group["k0"]["steps"]:
            if rows in seconds and not drafted and not prefill:
                seconds[rows].append(step)
    two, three = (statistics.median(seconds[b]) for b in (2, 3))
    return f"{three / two:.2f}", f"{1000 * three:.1f}", f"{1000 * two:.1f}"


def batch_leans(name: str = REPLAY) -> tuple[str, str]:
    """Over 2-3's counted pairs of k=2 against k=5 in replay `name`, the correlation of the
    incumbent blocks' mean batch less the explored block's with the pair's gain: the
    controller cell's, the A/A cell's."""
    found = []
    for cell in by_kind(result(name)["cells"]):
        lean, gains = [], []
        for pair in cell["pairs"]:
            if pair["bucket"] == "2-3" and pair["counted"] and pair["arm"] == 2:
                before, explored, after = pair["blocks"]
                lean.append((before["rows"] + after["rows"]) / (before["steps"] + after["steps"])
                            - explored["rows"] / explored["steps"])
                gains.append(pair["gain"])
        found.append(f"{statistics.correlation(lean, gains):.2f}")
    return found[0], found[1]


REPLAY_CLAIMS: list[tuple[str, str, Callable[[], tuple[str, ...]]]] = [
    (CONTROLLER_PAGE, r"The third controller cell in a row that stayed at k=5: fixed k=2 against "
     r"it (\S+ \[\S+ \S+\]) priced; 2-3's k=2 read \+([\d.]+)% with the switch's bound at "
     r"\+([\d.]+)%", lambda: (cell_entry(THIRD_C4, "input_grounded", 4, "k2", True), *stuck())),
    (CONTROLLER_PAGE, r"\*\*The A/A\*\* of this run: timed (\S+ \[\S+ \S+\]), priced (\S+ \[\S+ "
     r"\S+\]); its controller moved 2-3 to k=2 at its (\d+)th measured step",
     lambda: (*aa(THIRD_C4), switch_step(aa_cell(THIRD_C4)))),
    (CONTROLLER_PAGE, r"The A/A cell's replay (ends exactly) where the run did \(table and every "
     r"estimate\); the controller cell's (does not)", exact),
    (CONTROLLER_PAGE, r"replayed with the new fit \(at 8a2b4ce, \S+\), read a batch-3 step at "
     r"2-3 as (\S+) \(the controller cell\) and (\S+) \(the A/A\) times",
     lambda: batch_ratios(REFIT)),
    (CONTROLLER_PAGE, r"a step at batch 3 counts as ([\d.]+) times one at batch 2 \(the fixed k=0 "
     r"arm's median plain steps, ([\d.]+) and ([\d.]+) ms\)", plain_steps),
    (CONTROLLER_PAGE, r"correlates with the pair's gain at ([\d.]+) in the controller cell and "
     r"([\d.]+) in the A/A", batch_leans),
    ("README.md", r"the controller did not leave k=5 there within the run: (\S+ \[\S+ \S+\]), "
     r"(\S+ \[\S+ \S+\]) and (\S+ \[\S+ \S+\]) priced\. .* so a step at batch 3 reads ([\d.]+) "
     r"times one at batch 2", lambda: (*(cell_entry(name, "input_grounded", 4, "k2", True)
                                        for name in (CARRIED_C4, AGAIN_C4, THIRD_C4)),
                                      plain_steps()[0])),
]

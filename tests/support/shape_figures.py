"""The figures of "The batch shape fitted from every step" in docs/schedule-controller.md, each
computed from its result files (`support/doc_claims.py` checks them against the page): the
run's cells and its recorded steps, and the replay probe's files, made by the run's code (a
fresh replay with later code is no longer the run's controller)."""

from __future__ import annotations

from collections.abc import Callable

from support.carried_figures import switch_step
from support.replay_figures import batch_leans, batch_ratios, by_kind, exacts
from support.result_tables import result
from support.run_figures import CONTROLLER_PAGE, aa_cell, cell_of
from support.stepped_figures import aa, cell_entry

SHAPE_C4 = "controller-runs-steady-c4-shape"
"""input_grounded c=4 with the batch shape fitted from every step (dcc22c5), 120 s warm-up."""
SHAPE_REPLAY = f"{SHAPE_C4}-replay"
WARM_C4 = f"{SHAPE_C4}-warm"
"""The same with ten minutes of warm-up (`--warmup 600`)."""
WARM_REPLAY = f"{WARM_C4}-replay"


def shape_exactness() -> tuple[str, str]:
    """Whether each replay of the 120 s run ended where its run did, in words."""
    controller, aa_replay = exacts(SHAPE_REPLAY)
    return ("now ends exactly" if controller else "does not end",
            "ends exactly too" if aa_replay else "ends one")


def counted_k2(cell: dict) -> list[dict]:
    return [p for p in cell["pairs"] if p["bucket"] == "2-3" and p["counted"] and p["arm"] == 2]


def spreads(name: str = SHAPE_REPLAY, labels: tuple[str, ...] = ("2-3", "1-1")
            ) -> tuple[str, ...]:
    """One pair's spread of k=2 against k=5 in 2-3, then in 1-1: each cell's."""
    cells = by_kind(result(name)["cells"])
    return tuple(f"{cell['summary'][f'{label} k2 vs k5']['gain_sd']:.3f}"
                 for label in labels for cell in cells)


def block_steps() -> tuple[str, str]:
    """The fewest and most steps of a block in the controller cell's counted 2-3 pairs."""
    steps = [b["steps"] for p in counted_k2(by_kind(result(SHAPE_REPLAY)["cells"])[0])
             for b in p["blocks"]]
    return str(min(steps)), str(max(steps))


def stuck() -> tuple[str, str, str]:
    """2-3's k=2 estimate at the end of the controller cell: gain, bound (%), n_eff."""
    found = cell_of(SHAPE_C4, "input_grounded", 4)["estimates"]["2-3"]["k2"]
    return f"{100 * found['gain']:.1f}", f"{100 * found['low']:.1f}", f"{found['n_eff']:.1f}"


def switch_seconds() -> tuple[str, str]:
    """Seconds of the A/A controller's steps until 2-3's first switch (its replay's pair that
    switched); of the controller cell's in all."""
    aa_replay = by_kind(result(SHAPE_REPLAY)["cells"])[1]
    seen = next(p["at_s"] for p in aa_replay["pairs"] if p["bucket"] == "2-3" and p["switched"])
    cells = by_kind(result(f"{SHAPE_C4}.steps")["cells"])
    total = sum(step[2] for step in cells[0]["controller_steps"]["steps"]
                if not isinstance(step, int))
    return f"{seen:.0f}", f"{total:.0f}"


def drafted_token_prices() -> tuple[str, str]:
    """At 2-3, the controller cell's price of a drafted token at the end of its replay (the
    cost model's, `StepCostTable.extra`, as the run's code priced pairs) and the shape fit's
    (the drafted tokens' coefficient), in ms."""
    found = by_kind(result(SHAPE_REPLAY)["cells"])[0]["prices"]["2-3"]
    return f"{1000 * found['drafting_price'][1]:.1f}", f"{1000 * found['fit'][2]:.1f}"


def aa_misses(name: str) -> tuple[str, str]:
    """The A/A cell's estimates its replay (`NAME-replay`, made by the run's code) missed: how
    many (in words), in which bucket, each off by at most 2 in the fourth decimal."""
    missed = by_kind(result(f"{name}-replay")["cells"])[1]["misses"]
    assert all(abs(run - again) < 0.00025 for _, _, run, again in missed)
    words = {1: "one", 2: "two", 3: "three"}
    return words.get(len(missed), str(len(missed))), ", ".join(sorted({m[0] for m in missed}))


def warm_switch() -> tuple[str, str, str]:
    """The controller cell's one switch (1-1's step), and 2-3's own k=2 against k=5 in the
    replay: mean gain (%) and pairs."""
    (step, _), = cell_of(WARM_C4, "input_grounded", 4)["history"]["1-1"]
    found = by_kind(result(WARM_REPLAY)["cells"])[0]["summary"]["2-3 k2 vs k5"]
    return str(step), f"{100 * found['mean_gain']:.1f}", str(found["pairs"])


def warm_explored() -> tuple[str, str]:
    shares = cell_of(WARM_C4, "input_grounded", 4)["explore_share"].values()
    return f"{100 * min(shares):.0f}", f"{100 * max(shares):.0f}"


def warm_aa_switches() -> tuple[str, str]:
    history = aa_cell(WARM_C4)["history"]
    return str(history["2-3"][0][0]), str(history["1-1"][0][0])


SHAPE_CLAIMS: list[tuple[str, str, Callable[[], tuple[str, ...]]]] = [
    (CONTROLLER_PAGE, r"2-3's shape read a batch-3 step as ([\d.]+) times a batch-2 one in the "
     r"controller cell and ([\d.]+) in the A/A", lambda: batch_ratios(SHAPE_REPLAY)),
    (CONTROLLER_PAGE, r"The controller cell's replay (now ends exactly) where the run did; the "
     r"A/A's (ends one) in the fourth decimal", shape_exactness),
    (CONTROLLER_PAGE, r"correlates with the gain at ([\d.]+) in the controller cell and ([\d.]+) "
     r"in the A/A \(0\.77 and 0\.80 with the fit before\)",
     lambda: batch_leans(SHAPE_REPLAY)),
    (CONTROLLER_PAGE, r"still spreads ([\d.]+) and ([\d.]+) there, as much as 1-1's pairs of the "
     r"same two k \(([\d.]+) and ([\d.]+)\)", spreads),
    (CONTROLLER_PAGE, r"\(blocks of (\d+) to (\d+) steps\)", block_steps),
    (CONTROLLER_PAGE, r"The controller cell again stayed at k=5: fixed k=2 against it (\S+ \[\S+ "
     r"\S+\]) priced; 2-3's k=2 read \+([\d.]+)% with the switch's bound at (-?[\d.]+)% \(n_eff "
     r"([\d.]+)\)", lambda: (cell_entry(SHAPE_C4, "input_grounded", 4, "k2", True), *stuck())),
    (CONTROLLER_PAGE, r"timed (\S+ \[\S+ \S+\]), priced (\S+ \[\S+ \S+\]); its controller moved "
     r"2-3 to k=2 at its (\d+)th measured step, (\d+) s into its steps, where the controller "
     r"cell's controller had (\d+) s of steps in all",
     lambda: (*aa(SHAPE_C4), switch_step(aa_cell(SHAPE_C4)), *switch_seconds())),
    (CONTROLLER_PAGE, r"it prices a drafted token at ([\d.]+) ms where this fit reads ([\d.]+) ms",
     drafted_token_prices),
    (CONTROLLER_PAGE, r"\*\*Met\*\*: fixed k=2 against the controller (\S+ \[\S+ \S+\]) priced "
     r"and (\S+ \[\S+ \S+\]) timed",
     lambda: tuple(cell_entry(WARM_C4, "input_grounded", 4, "k2", p) for p in (True, False))),
    (CONTROLLER_PAGE, r"was 1-1's, to k=2 at its (\d+)th measured step, carried to 2-3 and 4-7 .* "
     r"2-3's own k=2 read \+([\d.]+)% over k=5 in (\d+) pairs", warm_switch),
    (CONTROLLER_PAGE, r"its exploration: (\d+)-(\d+)% of each bucket's steps", warm_explored),
    (CONTROLLER_PAGE, r"\*\*The A/A\*\*: timed (\S+ \[\S+ \S+\]), priced (\S+ \[\S+ \S+\]); its "
     r"controller moved 2-3 to k=2 at its (\d+)th measured step and 1-1 at its (\d+)th",
     lambda: (*aa(WARM_C4), *warm_aa_switches())),
    (CONTROLLER_PAGE, r"the controller cell's replay (ends exactly) where the run did, the A/A's "
     r"again (\w+) estimates of (\S+) in the fourth decimal off",
     lambda: ("ends exactly" if exacts(WARM_REPLAY)[0] else "does not end",
              *aa_misses(WARM_C4))),
    (CONTROLLER_PAGE, r"the A/A's ends one in the fourth decimal off in (\w+) estimates of (\S+) "
     r"\(table", lambda: aa_misses(SHAPE_C4)),
    (CONTROLLER_PAGE, r"pairs of k=2 against k=5 spread ([\d.]+) and ([\d.]+) \(controller cell, "
     r"A/A\)", lambda: spreads(WARM_REPLAY, ("2-3",))),
    ("README.md", r"fixed k=2 against the controller read (\S+ \[\S+ \S+\]) priced there, the A/A "
     r"(\S+ \[\S+ \S+\]); with two minutes it stayed at k=5 once more \((\S+ \[\S+ \S+\])\)",
     lambda: (cell_entry(WARM_C4, "input_grounded", 4, "k2", True), aa(WARM_C4)[1],
              cell_entry(SHAPE_C4, "input_grounded", 4, "k2", True))),
]

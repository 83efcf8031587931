"""The figures of the runs after explorations were paired across visits (5035c37) as
docs/schedule-controller.md quotes them ("Explorations paired across visits"), each computed
from its result file (`support/doc_claims.py` checks them)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from support.result_tables import result
from support.run_figures import (
    AHEAD,
    CONTROLLER_PAGE,
    best_entry,
    best_ratio,
    cell_best,
    controller_cells,
    geometric_mean,
    k0_range,
    losses,
    run_pairs_aa,
    run_pairs_met,
    within,
)

BEFORE, AFTER = "bucket-visits-multi-turn-c32", "bucket-visits-multi-turn-c32-carry"
CARRY = "controller-runs-steady-multi-turn-c16-c32-carry"
ALL = "controller-runs-steady-c16-c32-uniform-carry"
C4_CARRY, C4_AHEAD = ("controller-runs-steady-c4-uniform-carry",
                      "controller-runs-steady-c4-uniform-write-ahead")


def probe_summary(name: str) -> dict[str, dict[str, Any]]:
    """The probe's per-bucket summary, made again from its trace (pairs completed over the
    run, which the file before 5035c37 does not hold)."""
    from benchmarks.probes.bucket_visits import summary

    return summary([tuple(step) for step in result(name)["trace"]])


def visits_exploring(name: str, label: str) -> int:
    """Visits to bucket `label` in which a step ran in an exploration block."""
    from vllm_specdec_plugin.core.step_cost import bucket_label

    found, inside, previous = 0, False, None
    for batch, _, _, arm, incumbent, _, _ in result(name)["trace"]:
        here = bucket_label(batch.bit_length()) == label
        if here and previous != label:
            inside = False
        if here and arm is not None and arm != incumbent and not inside:
            found, inside = found + 1, True
        previous = label if here else None
    return found


def probe_figures() -> tuple[str, ...]:
    """32-63 before: visits exploring, visits, shortest and longest visit, pairs completed;
    after: pairs completed, visits, switches; all buckets' pairs completed after and before."""
    before, after = probe_summary(BEFORE), probe_summary(AFTER)
    top, was = after["32-63"], before["32-63"]
    return (str(visits_exploring(BEFORE, "32-63")), str(len(was["visits"])),
            str(min(was["visits"])), str(max(was["visits"])),
            str(was["paired"]), str(top["paired"]), str(len(top["visits"])), str(top["switches"]),
            str(sum(b["paired"] for b in after.values())),
            str(sum(b["paired"] for b in before.values())))


def share_range(name: str, workload: str | None = None,
                concurrency: int | None = None) -> tuple[str, str]:
    """The lowest and highest share (%) of a bucket's steps explored over the run's cells (of
    `workload`'s alone, at `concurrency` alone, where given)."""
    found = [v for c in controller_cells(name) if workload in (None, c["workload"])
             and concurrency in (None, c["concurrency"]) for v in c["explore_share"].values()]
    return f"{100 * min(found):.0f}", f"{100 * max(found):.0f}"


def pairs_against_k0(cell: dict[str, Any]) -> tuple[int, int]:
    """A controller cell's pairs against k=0 and against any arm, since each bucket's last
    switch."""
    arms = [v for by_arm in cell["pairs"].values() for v in by_arm.items()]
    return sum(n for k, n in arms if k == "k0"), sum(n for _, n in arms)


def k0_pairs(name: str, workload: str) -> tuple[str, ...]:
    """`pairs_against_k0` per cell of `workload`, by concurrency."""
    cells = sorted((c for c in controller_cells(name) if c["workload"] == workload),
                   key=lambda c: c["concurrency"])
    return tuple(str(n) for cell in cells for n in pairs_against_k0(cell))


def k0_losses(name: str, workload: str) -> tuple[str, str]:
    """k=0's throughput loss against the best fixed k, in %, lowest and highest over cells."""
    found = [100 * (1 - best_ratio(c) / c["against_last"]["k0"]["ratio"])
             for c in controller_cells(name) if c["workload"] == workload]
    return f"{min(found):.0f}", f"{max(found):.0f}"


VISIT_CLAIMS: list[tuple[str, str, Callable[[], tuple[str, ...]]]] = [
    (CONTROLLER_PAGE, r"Before,\s+32-63 started an exploration in (\d+) of its (\d+) visits "
     r"\(of (\d+) to (\d+) steps\), each too late for the incumbent block after it, and "
     r"completed (\d+) pairs.*?After, it completed (\d+) pairs in (\d+) visits and switched "
     r"(\w+) \(k=0 to k=2\), and the buckets together completed (\d+) pairs in the minute "
     r"against (\d+)\.",
     lambda: tuple("once" if (i == 7 and v == "1") else v for i, v in enumerate(probe_figures()))),
    (CONTROLLER_PAGE, r"The A/A beside this run \(k0 against k0, open_ended, c=32\) read "
     r"(\S+ \[\S+ \S+\])\.", lambda: (run_pairs_aa(CARRY),)),
    (CONTROLLER_PAGE, r"multi_turn misses by ([\d.]+)% at c=16 and ([\d.]+)% at c=32\*\* "
     r"\(([\d.]+)% and ([\d.]+)% in the b90a005\s+run\)",
     lambda: losses(CARRY, "multi_turn") + losses(AHEAD, "multi_turn")),
    (CONTROLLER_PAGE, r"every bucket explored (\d+)-(\d+)% of its steps \((\d+)-(\d+)% in\s+the "
     r"b90a005 run\), about half of it on k=0 \((\d+) of (\d+) and (\d+) of (\d+) pairs since "
     r"the last\s+switch\), which loses (\d+)-(\d+)% of k=5's throughput",
     lambda: share_range(CARRY, "multi_turn") + share_range(AHEAD, "multi_turn")
     + k0_pairs(CARRY, "multi_turn") + k0_losses(CARRY, "multi_turn")),
]
VISIT_CLAIMS.append(
    ("README.md", r"multi_turn's top bucket reaches k=5 at c=16 and 32 and its miss falls to "
     r"([\d.]+)% and ([\d.]+)%", lambda: losses(CARRY, "multi_turn")))


def points_inside(old: str, new: str) -> str:
    """Cells whose best fixed k's point in run `old` lies inside its interval in run `new`."""
    found = 0
    for cell in controller_cells(new):
        key = (cell["workload"], cell["concurrency"])
        was, now = best_entry(old, *key), best_entry(new, *key)
        found += now["low"] <= was["ratio"] <= now["high"]
    return str(found)


def k0_pair_shares(name: str, workloads: tuple[str, ...]) -> tuple[str, str]:
    """The lowest and highest share (%) of pairs against k=0 over `workloads`' cells."""
    found = [100 * k0 / every for k0, every in (
        pairs_against_k0(c) for c in controller_cells(name) if c["workload"] in workloads)]
    return f"{min(found):.0f}", f"{max(found):.0f}"


VISIT_CLAIMS.extend([
    (CONTROLLER_PAGE, r"The A/A of this run \(k0 against k0, open_ended, c=32\) read "
     r"(\S+ \[\S+ \S+\])\.", lambda: (run_pairs_aa(ALL),)),
    (CONTROLLER_PAGE, r"\*\*(\d+) of (\d+) cells met\*\* by the interval's low end \((\d+) in the "
     r"b90a005 run\); by the point the\s+controller is within 2% of the best fixed k in (\d+) "
     r"of 8 \((\d+)\), and the geometric mean of best\s+fixed k / controller over the 8 cells "
     r"rose from ([\d.]+) to ([\d.]+)\. Against k=0 it is faster\s+in every cell by the point "
     r"\(([\d.]+) to ([\d.]+)\)",
     lambda: (*run_pairs_met(ALL), run_pairs_met(AHEAD)[0], within(ALL), within(AHEAD),
              geometric_mean(AHEAD), geometric_mean(ALL), *k0_range(ALL))),
    (CONTROLLER_PAGE, r"multi_turn at c=16 is met: ([\d.]+)\*\* (\[\S+ \S+\]) against fixed k=5 "
     r"\(([\d.]+) in the b90a005\s+run, ([\d.]+) in the multi_turn-only run above\)\. At c=32 "
     r"it misses by ([\d.]+)% \(([\d.]+)% in the\s+b90a005 run, ([\d.]+)% in the run above\)",
     lambda: (cell_best(ALL, "multi_turn", 16),
              cell_best(ALL, "multi_turn", 16, True).split(" ", 1)[1],
              cell_best(AHEAD, "multi_turn", 16), cell_best(CARRY, "multi_turn", 16),
              losses(ALL, "multi_turn")[1], losses(AHEAD, "multi_turn")[1],
              losses(CARRY, "multi_turn")[1])),
    (CONTROLLER_PAGE, r"the b90a005 run's point lies inside this run's interval in (\d+) of 8 "
     r"cells", lambda: (points_inside(AHEAD, ALL),)),
    (CONTROLLER_PAGE, r"\*\*The price: every bucket now explores (\d+)-(\d+)% of its steps\*\* "
     r"\((\d+)-(\d+)% in the b90a005 run\)",
     lambda: share_range(ALL) + share_range(AHEAD)),
    (CONTROLLER_PAGE, r"in input_grounded and multi_turn (\d+)-(\d+)% of the pairs since each "
     r"bucket's last\s+switch are against k=0",
     lambda: k0_pair_shares(ALL, ("input_grounded", "multi_turn"))),
])


VISIT_CLAIMS.extend([
    (CONTROLLER_PAGE, r"The A/A of this run \(k0 against k0, open_ended, c=4\) read "
     r"(\S+ \[\S+ \S+\])\.", lambda: (run_pairs_aa(C4_CARRY),)),
    (CONTROLLER_PAGE, r"\*\*(\d+) of (\d+) cells met\*\* by the interval's low end \(open_ended\), "
     r"as in the b90a005 run; by the\s+point the controller is within 2% of the best fixed k in "
     r"(\d+) of 4 \((\d+)\), and the geometric\s+mean of best fixed k / controller rose from "
     r"([\d.]+) to ([\d.]+)\. The shares explored are those\s+of the b90a005 run within a few "
     r"points \((\d+)-(\d+)% against (\d+)-(\d+)%\)",
     lambda: (*run_pairs_met(C4_CARRY), within(C4_CARRY), within(C4_AHEAD),
              geometric_mean(C4_AHEAD), geometric_mean(C4_CARRY), *share_range(C4_CARRY),
              *share_range(C4_AHEAD))),
])

VISIT_CLAIMS.append(
    ("README.md", r"(\d+) of (\d+) cells met, (\d+) of 8 within 2% by the point, the geometric "
     r"mean of best fixed k /\s+controller ([\d.]+), multi_turn met at c=16 and missing by "
     r"([\d.]+)% at c=32; at c=4.*?(\d+) of (\d+) met, (\d+) of 4 within 2% by the point, the "
     r"geometric mean ([\d.]+)\.",
     lambda: (*run_pairs_met(ALL), within(ALL), geometric_mean(ALL), losses(ALL, "multi_turn")[1],
              *run_pairs_met(C4_CARRY), within(C4_CARRY), geometric_mean(C4_CARRY))))

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
    best_ratio,
    controller_cells,
    losses,
    run_pairs_aa,
)

BEFORE, AFTER = "bucket-visits-multi-turn-c32", "bucket-visits-multi-turn-c32-carry"
CARRY = "controller-runs-steady-multi-turn-c16-c32-carry"


def probe_summary(name: str) -> dict[str, dict[str, Any]]:
    """The probe's per-bucket summary, made again from its trace (pairs completed over the
    run, which the file before 5035c37 does not hold)."""
    from benchmarks.probes.bucket_visits import summary

    return summary([tuple(step) for step in result(name)["trace"]])


def visits_exploring(name: str, label: str) -> int:
    """Visits to bucket `label` in which a step ran in an exploration block."""
    found, inside, previous = 0, False, None
    for batch, _, _, arm, incumbent, _, _ in result(name)["trace"]:
        here = f"{1 << (batch.bit_length() - 1)}-{(2 << (batch.bit_length() - 1)) - 1}" == label
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


def shares(name: str, workload: str) -> tuple[str, str]:
    """The lowest and highest share of a bucket's steps explored over `workload`'s cells."""
    found = [v for c in controller_cells(name) if c["workload"] == workload
             for v in c["explore_share"].values()]
    return f"{100 * min(found):.0f}", f"{100 * max(found):.0f}"


def k0_pairs(name: str, workload: str) -> tuple[str, ...]:
    """Per cell of `workload` (by concurrency): pairs against k=0 and against any arm, since
    each bucket's last switch."""
    found: list[str] = []
    for cell in sorted((c for c in controller_cells(name) if c["workload"] == workload),
                       key=lambda c: c["concurrency"]):
        arms = [v for by_arm in cell["pairs"].values() for v in by_arm.items()]
        found += [str(sum(n for k, n in arms if k == "k0")), str(sum(n for _, n in arms))]
    return tuple(found)


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
     lambda: shares(CARRY, "multi_turn") + shares(AHEAD, "multi_turn")
     + k0_pairs(CARRY, "multi_turn") + k0_losses(CARRY, "multi_turn")),
]
VISIT_CLAIMS.append(
    ("README.md", r"multi_turn's top bucket reaches k=5 at c=16 and 32 and its miss falls to "
     r"([\d.]+)% and ([\d.]+)%", lambda: losses(CARRY, "multi_turn")))

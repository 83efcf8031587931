"""The figures of "c=1 with pairs read as rate differences" and "Again with priced pairs and pairs
read as rate differences" (ShareGPT) in docs/schedule-controller.md and of the README's sentence
on the first, each computed from its result file (`support/doc_claims.py` checks them against
the page)."""

from __future__ import annotations

from collections.abc import Callable

from support.priced_figures import met_cells, same_tables
from support.run_figures import (
    CONTROLLER_PAGE,
    aa_entry,
    best_entry,
    cell_best,
    cell_of,
    controller_cells,
    geometric_mean,
    interval_points,
    k0_range,
    run_pairs_aa,
    run_pairs_met,
    within,
)

GAIN_C1 = "controller-runs-steady-c1-gain"
GAIN_SHAREGPT = "sharegpt-controller-uniform-gain"
LOG_SHAREGPT = "sharegpt-controller-uniform"
"""ShareGPT before priced pairs and rate-difference pairs."""
LOG_C1 = "controller-runs-steady"
"""The same command with pairs read as log ratios (790c02d)."""


def shares_1_1(name: str) -> str:
    """Each cell's share of bucket 1-1's steps explored, in file order: `4%, 13%, 13%, 3%`."""
    return ", ".join(f"{100 * c['explore_share']['1-1']:.0f}%" for c in controller_cells(name))


def common_k(name: str, other: str) -> str:
    """The one k every cell of both runs ended at, or a word that fails the claim."""
    ks = {k for run in (name, other) for c in controller_cells(run)
          for k in dict(c["table_after"]).values()}
    return str(ks.pop()) if len(ks) == 1 and same_tables(name, other) else "mixed"


def overlap_everywhere(name: str, other: str) -> str:
    """Whether each cell's best-fixed-k interval overlaps the other run's."""
    def overlaps(workload: str, concurrency: int) -> bool:
        one, two = (best_entry(run, workload, concurrency) for run in (name, other))
        return one["low"] <= two["high"] and two["low"] <= one["high"]
    return "every cell" if all(overlaps(c["workload"], c["concurrency"])
                               for c in controller_cells(name)) else "not every cell"


def aa_points(name: str) -> str:
    """The width of the run's A/A interval, in points, one decimal."""
    e = aa_entry(name)
    return f"{100 * (e['high'] - e['low']):.1f}"


def best_of(name: str, concurrency: int) -> tuple[str, str]:
    """(ratio, k) of the sharegpt cell's best fixed arm."""
    against = cell_of(name, "sharegpt", concurrency)["against_last"]
    arm = min(against, key=lambda k: against[k]["ratio"])
    return f"{against[arm]['ratio']:.3f}", arm[1:]


GAIN_CLAIMS: list[tuple[str, str, Callable[[], tuple[str, ...]]]] = [
    (CONTROLLER_PAGE, r"The A/A \(k0 against k0, open_ended, c=1\): (\S+ \[\S+ \S+\]) \((\S+ "
     r"\[\S+ \S+\]) in the log-ratio run\)\.",
     lambda: (run_pairs_aa(GAIN_C1), run_pairs_aa(LOG_C1))),
    (CONTROLLER_PAGE, r"\*\*(\d) of (\d) cells met\*\* by the interval's low end \((\d) of 4 with "
     r"log-ratio pairs\): (.+?) now, (\S+ \[\S+ \S+\]) of fixed k=5; (.+?) then\. By the point "
     r"the controller is within 2% of the best fixed k in (\d) of 4 \((\d) then\); the "
     r"geometric mean of best fixed k / controller is ([\d.]+) \(([\d.]+) then\)\. Against k=0 "
     r"it is faster in every cell \(([\d.]+) to ([\d.]+)\)\.",
     lambda: (*run_pairs_met(GAIN_C1), run_pairs_met(LOG_C1)[0],
              met_cells(GAIN_C1).replace(" 1", ""),
              cell_best(GAIN_C1, "input_grounded", 1, True),
              met_cells(LOG_C1).replace(" 1", ""), within(GAIN_C1), within(LOG_C1),
              geometric_mean(GAIN_C1), geometric_mean(LOG_C1), *k0_range(GAIN_C1))),
    (CONTROLLER_PAGE, r"\*\*Every cell ended at k=(\d)\*\*, as in the log-ratio run, and explored "
     r"no more of its steps \((.+?) against (.+?)\):",
     lambda: (common_k(GAIN_C1, LOG_C1), shares_1_1(GAIN_C1), shares_1_1(LOG_C1))),
    (CONTROLLER_PAGE, r"mt_bench misses by the point, (\S+ \[\S+ \S+\]) of fixed k=5\.",
     lambda: (cell_best(GAIN_C1, "mt_bench", 1, True),)),
    (CONTROLLER_PAGE, r"One run each: the two runs' intervals overlap in (every cell|not every "
     r"cell),", lambda: (overlap_everywhere(GAIN_C1, LOG_C1),)),
    # ShareGPT, "Again with priced pairs and pairs read as rate differences"
    (CONTROLLER_PAGE, r"The A/A beside them \(k0 against k0, c=32\) read (\S+ \[\S+ \S+\]), an "
     r"interval ([\d.]+) points wide \(([\d.]+) in the run above\)\.",
     lambda: (run_pairs_aa(GAIN_SHAREGPT), aa_points(GAIN_SHAREGPT), aa_points(LOG_SHAREGPT))),
    (CONTROLLER_PAGE, r"\*\*(\d) of (\d) cells met\*\* \((\d) of (\d) in the run above\)\. By the "
     r"point the controller is within 2% of the best fixed arm in (both|not both), ([\d.]+) of "
     r"fixed k=(\d) at c=16 and ([\d.]+) of fixed k=(\d) at c=32; the intervals are ([\d.]+) "
     r"and ([\d.]+) points wide, as wide as the A/A's\. (Every bucket ended|Not every bucket "
     r"ended) at the k it ended at in the run above\.",
     lambda: (*run_pairs_met(GAIN_SHAREGPT), *run_pairs_met(LOG_SHAREGPT),
              "both" if within(GAIN_SHAREGPT) == "2" else "not both",
              *best_of(GAIN_SHAREGPT, 16), *best_of(GAIN_SHAREGPT, 32),
              interval_points(GAIN_SHAREGPT, "sharegpt", 16, 1),
              interval_points(GAIN_SHAREGPT, "sharegpt", 32, 1),
              "Every bucket ended" if same_tables(GAIN_SHAREGPT, LOG_SHAREGPT)
              else "Not every bucket ended")),
    ("README.md", r"At c=1 with pairs read as rate differences \(.+?\), whose mean .+? at batch "
     r"1, (\d) of (\d) cells are met \((\d) with log-ratio pairs\), every cell again at k=(\d)",
     lambda: (*run_pairs_met(GAIN_C1), run_pairs_met(LOG_C1)[0], common_k(GAIN_C1, LOG_C1))),
]

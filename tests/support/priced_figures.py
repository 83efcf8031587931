"""The figures of "All four workloads at c=16 and c=32 with priced pairs" and "c=4 with priced
pairs" in docs/schedule-controller.md and of the README's sentence on them, each computed from
its result file (`support/doc_claims.py` checks them against the page)."""

from __future__ import annotations

from collections.abc import Callable

from support.noise_figures import ALL_120, WARM_IG
from support.result_tables import RUN_PAIRS_MARGIN
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
from support.visit_figures import share_range

PRICED_120 = "controller-runs-steady-c16-c32-uniform-priced"
C4_PRICED = "controller-runs-steady-c4-uniform-priced"
C4_RAW = "controller-runs-steady-c4-uniform-carry"


def met_cells(name: str) -> str:
    """`input_grounded 32, open_ended 16 and multi_turn 32`: the cells met, in file order."""
    cells = [f"{c['workload']} {c['concurrency']}" for c in controller_cells(name)
             if best_entry(name, c["workload"], c["concurrency"])["low"] >= RUN_PAIRS_MARGIN]
    return ", ".join(cells[:-1]) + f" and {cells[-1]}" if len(cells) > 1 else "".join(cells)


def width_ratio() -> str:
    """How many times the raw-pairs run's A/A interval this run's is, in words."""
    widths = [e["high"] - e["low"] for e in (aa_entry(PRICED_120), aa_entry(ALL_120))]
    return {2: "twice", 3: "three times", 4: "four times"}[round(widths[0] / widths[1])]


def misses_above_point() -> tuple[str, str]:
    """The widths (points) of the best-k intervals of cells that miss but read >= 0.98."""
    widths = [interval_points(PRICED_120, c["workload"], c["concurrency"], 1)
              for c in controller_cells(PRICED_120)
              if (e := best_entry(PRICED_120, c["workload"], c["concurrency"]))["low"]
              < RUN_PAIRS_MARGIN <= e["ratio"]]
    return min(widths, key=float), max(widths, key=float)


def table_of(name: str, workload: str, concurrency: int) -> dict[str, int]:
    return dict(cell_of(name, workload, concurrency)["table_after"])


def same_tables(one: str, other: str) -> bool:
    def tables(name: str) -> dict[tuple[str, int], dict[str, int]]:
        return {(c["workload"], c["concurrency"]): c["table_after"]
                for c in controller_cells(name)}
    return tables(one) == tables(other)


PRICED_CLAIMS: list[tuple[str, str, Callable[[], tuple[str, ...]]]] = [
    # "All four workloads at c=16 and c=32 with priced pairs"
    (CONTROLLER_PAGE, r"The A/A of this run \(k0 against k0, open_ended, c=32\) read (\S+ \[\S+ "
     r"\S+\]), an interval (\w+(?: \w+)?) as wide as the raw-pairs run's \((\S+ \[\S+ \S+\])\)",
     lambda: (run_pairs_aa(PRICED_120), width_ratio(), run_pairs_aa(ALL_120))),
    (CONTROLLER_PAGE, r"\*\*(\d) of (\d) cells met\*\* by the interval's low end, as with raw "
     r"pairs, but other cells: (.+?) now; (.+?) then\. By the point the controller is within 2% "
     r"of the best fixed k in (\d) of 8 \((\d) then\); the geometric mean of best fixed k / "
     r"controller over the 8 cells is ([\d.]+) \(([\d.]+) then\)\. Against k=0 it is faster in "
     r"every cell by the point \(([\d.]+) to ([\d.]+)\)\.",
     lambda: (*run_pairs_met(PRICED_120), met_cells(PRICED_120), met_cells(ALL_120),
              within(PRICED_120), within(ALL_120), geometric_mean(PRICED_120),
              geometric_mean(ALL_120), *k0_range(PRICED_120))),
    (CONTROLLER_PAGE, r"input_grounded 16 \(([\d.]+) of fixed k=2: 4-7, 8-15 and 16-31 ended at "
     r"k=(\d) here, k=(\d) everywhere but 8-15 in the ten-minute run that met it\) and multi_turn "
     r"16 \(([\d.]+) of fixed k=5, with every bucket at k=(\d): the price of exploring, "
     r"(\d+)-(\d+)% of the steps\)\. The other three misses are above 0\.98 by the point and "
     r"miss by an interval ([\d.]+) to ([\d.]+) points wide\.",
     lambda: (cell_best(PRICED_120, "input_grounded", 16),
              str(table_of(PRICED_120, "input_grounded", 16)["4-7"]),
              str(table_of(WARM_IG, "input_grounded", 16)["4-7"]),
              cell_best(PRICED_120, "multi_turn", 16),
              str(set(table_of(PRICED_120, "multi_turn", 16).values()).pop()),
              *share_range(PRICED_120, "multi_turn", 16), *misses_above_point())),
    # "c=4 with priced pairs"
    (CONTROLLER_PAGE, r"The A/A of the priced run \(k0 against k0, open_ended, c=4\) read "
     r"(\S+ \[\S+ \S+\])\.", lambda: (run_pairs_aa(C4_PRICED),)),
    (CONTROLLER_PAGE, r"\*\*(\d) of (\d) cells met\*\* by the interval's low end \((\d) of 4 with "
     r"raw pairs\): (.+?)\. Only 4-7 is priced at c=4, and (every cell|not every cell) ended "
     r"with the table of the raw-pairs run,",
     lambda: (*run_pairs_met(C4_PRICED), run_pairs_met(C4_RAW)[0],
              met_cells(C4_PRICED).replace(" 4", ""),
              "every cell" if same_tables(C4_PRICED, C4_RAW) else "not every cell")),
    (CONTROLLER_PAGE, r"\*\*mt_bench misses: ([\d.]+)\*\* (\[\S+ \S+\]) of fixed k=5, an interval "
     r"([\d.]+) points wide \((\S+ \[\S+ \S+\]) with raw pairs\)\. By the point the controller "
     r"is within 2% of the best fixed k in (\d) of 4 \((\d) then\); the geometric mean of best "
     r"fixed k / controller is ([\d.]+) \(([\d.]+) then\)\. Against k=0 it is faster in every "
     r"cell \(([\d.]+) to ([\d.]+)\)\.",
     lambda: (cell_best(C4_PRICED, "mt_bench", 4),
              cell_best(C4_PRICED, "mt_bench", 4, True).split(" ", 1)[1],
              interval_points(C4_PRICED, "mt_bench", 4, 1),
              cell_best(C4_RAW, "mt_bench", 4, True), within(C4_PRICED), within(C4_RAW),
              geometric_mean(C4_PRICED), geometric_mean(C4_RAW), *k0_range(C4_PRICED))),
    ("README.md", r"With priced pairs after 120 s of warm-up, (\d) of (\d) cells at c=16 and 32 "
     r"are met \((\d) with raw pairs, other cells\) and (\d) of (\d) at c=4 \((\d) with raw "
     r"pairs, with the same tables\)",
     lambda: (*run_pairs_met(PRICED_120), run_pairs_met(ALL_120)[0], *run_pairs_met(C4_PRICED),
              run_pairs_met(C4_RAW)[0])),
]

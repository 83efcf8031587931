"""The figures of `run_pairs` and `step_trace` result files as the docs' prose quotes them
(`support/doc_claims.py`)."""

from __future__ import annotations

from collections.abc import Callable

from support.result_tables import RUN_PAIRS_MARGIN, is_controller_cell, result

CONTROLLER_PAGE = "docs/schedule-controller.md"


def run_pairs_met(name: str) -> tuple[str, str]:
    """(met, cells): controller cells whose best fixed k's interval low is at least 0.98."""
    cells = controller_cells(name)
    met = sum(min(c["against_last"].values(), key=lambda e: e["ratio"])["low"]
              >= RUN_PAIRS_MARGIN for c in cells)
    return str(met), str(len(cells))


def best_k_range(name: str) -> tuple[str, str]:
    """The lowest and highest best-fixed-k ratio over the run's controller cells."""
    best = [min(e["ratio"] for e in c["against_last"].values())
            for c in controller_cells(name)]
    return f"{min(best):.3f}", f"{max(best):.3f}"


def aa_cell(name: str) -> dict:
    """The run's A/A cell: one arm twice (`--aa`; the controller's too)."""
    return next(c for c in result(name)["cells"] if len(set(c["arms"])) == 1)


def aa_entry(name: str) -> dict:
    """The run's A/A cell's entry (one arm against itself)."""
    cell = next(c for c in result(name)["cells"] if not is_controller_cell(c))
    return next(iter(cell["against_last"].values()))


def run_pairs_aa(name: str) -> str:
    """The run's A/A cell as the docs quote it."""
    e = aa_entry(name)
    return f"{e['ratio']:.3f} [{e['low']:.3f}, {e['high']:.3f}]"


def step_trace(name: str) -> tuple[str, ...]:
    """`step_trace`'s k0 and k5 as docs/schedule-controller.md quotes them."""
    k0, k5 = (result(name)["arms"][arm] for arm in ("k0", "k5"))
    if name.endswith("fixed"):
        return (f"{k0['wall_s']:.2f}", f"{k5['wall_s']:.2f}",
                *(f"{a['decode_by_batch']['16']['tokens_per_s']:.2f}" for a in (k0, k5)),
                *(str(a["kinds"]["prefill"]["steps"]) for a in (k0, k5)))
    return (*(str(a["kinds"]["prefill"]["steps"]) for a in (k0, k5)),
            *(f"{a['wall_s']:.2f}" for a in (k0, k5)),
            *(f"{a['decode_by_batch']['16']['tokens_per_s']:.2f}" for a in (k0, k5)),
            *(f"{100 * a['kinds']['prefill']['seconds'] / a['seconds']:.0f}" for a in (k0, k5)),
            *(f"{a['kinds']['prefill']['tokens_per_s']:.2f}" for a in (k0, k5)))


def paired_cell(name: str, concurrency: int, interval: bool = True) -> str:
    """A paired result's cell (its only workload) as the prose quotes it: "1.034 [1.020, 1.048]"
    or, without `interval`, "1.034"."""
    cell = next(c for c in result(name)["cells"] if c["concurrency"] == concurrency)
    low, high = cell["ratio_interval"]
    median = f"{cell['ratio_median']:.3f}"
    return f"{median} [{low:.3f}, {high:.3f}]" if interval else median


def controller_cells(name: str) -> list[dict]:
    return [c for c in result(name)["cells"] if is_controller_cell(c)]


def best_ratio(cell: dict) -> float:
    return min(e["ratio"] for e in cell["against_last"].values())


def k0_range(name: str) -> tuple[str, str]:
    """The lowest and highest k0 / controller ratio over the run's controller cells."""
    k0 = [c["against_last"]["k0"]["ratio"] for c in controller_cells(name)]
    return f"{min(k0):.3f}", f"{max(k0):.3f}"


def losses(name: str, workload: str) -> tuple[str, ...]:
    """`workload`'s loss against the best fixed k, in %, per concurrency."""
    return tuple(f"{100 * (1 - best_ratio(c)):.1f}" for c in sorted(
        (c for c in controller_cells(name) if c["workload"] == workload),
        key=lambda c: c["concurrency"]))


def other_misses(name: str, workload: str) -> tuple[str, ...]:
    """How many cells of other workloads miss, and their best-fixed-k ratios' range."""
    ratios = [best_ratio(c) for c in controller_cells(name) if c["workload"] != workload
              and min(c["against_last"].values(), key=lambda e: e["ratio"])["low"]
              < RUN_PAIRS_MARGIN]
    words = {1: "one", 2: "two", 3: "three", 4: "four"}
    return words[len(ratios)], f"{min(ratios):.3f}", f"{max(ratios):.3f}"


def shortest_requests(groups: int = 10, tokens: int = 96) -> tuple[str, ...]:
    """Per concurrency 16 and 32: the shortest request of each group (`run_pairs --lengths
    uniform`), lowest, highest and mean."""
    from benchmarks.lib.workloads import output_lengths

    out: tuple[str, ...] = ()
    for c in (16, 32):
        lengths = output_lengths("uniform", tokens, groups * c)
        mins = [min(lengths[i:i + c]) for i in range(0, groups * c, c)]
        out += (str(min(mins)), str(max(mins)), f"{sum(mins) / len(mins):.0f}")
    return out


C16_C32 = "controller-runs-steady-c16-c32-uniform"
RUN_CLAIMS: list[tuple[str, str, Callable[[], tuple[str, ...]]]] = [
    (CONTROLLER_PAGE, r"\*\*(\d+) of (\d+) cells met\*\* by the interval's low end \(open_ended, "
     r"where k0", lambda: run_pairs_met("controller-runs-steady-c4-uniform")),
    (CONTROLLER_PAGE, r"The A/A beside it \(k0 against k0, open_ended, c=4\) read "
     r"(\S+ \[\S+ \S+\])\.", lambda: (run_pairs_aa("controller-runs-steady-c4-uniform"),)),
    (CONTROLLER_PAGE, r"\*\*(\d+) of (\d+) cells met\*\* by the interval's low end \(open_ended at "
     r"16", lambda: run_pairs_met(C16_C32)),
    (CONTROLLER_PAGE, r"The A/A beside it \(k0 against k0, open_ended, c=32\) read "
     r"(\S+ \[\S+ \S+\])\.", lambda: (run_pairs_aa(C16_C32),)),
    (CONTROLLER_PAGE, r"Against k=0 the controller is faster in every cell \(([\d.]+) to "
     r"([\d.]+)\)", lambda: k0_range(C16_C32)),
    (CONTROLLER_PAGE, r"multi_turn misses by ([\d.]+)% at c=16 and ([\d.]+)% at c=32\*\*, and the "
     r"other (\w+) misses \(([\d.]+) to ([\d.]+) by the point\)",
     lambda: losses(C16_C32, "multi_turn") + other_misses(C16_C32, "multi_turn")),
    (CONTROLLER_PAGE, r"the shortest request of a group here has (\d+) to (\d+) tokens at c=16, "
     r"mean (\d+), and (\d+) to (\d+) at c=32, mean (\d+)\)", shortest_requests),
]
"""(page, pattern, expected) of sentences about `run_pairs` results (`doc_claims.Claim`)."""


def top_bucket() -> tuple[str, ...]:
    """The multi_turn c=16 diagnostic: 16-31's pairs and dropped explorations, the range of
    both over the buckets, the range of explored shares, and k5 / controller."""
    cell = result("controller-top-bucket-multi-turn-c16")["cells"][0]
    pairs = {b: sum(arms.values()) for b, arms in cell["pairs"].items()}
    dropped, shares = cell["unpaired"], cell["explore_share"].values()
    e = cell["against_last"]["k5"]
    return (str(pairs["16-31"]), str(dropped["16-31"]), str(min(pairs.values())),
            str(max(pairs.values())), str(min(dropped.values())), str(max(dropped.values())),
            f"{100 * min(shares):.0f}", f"{100 * max(shares):.0f}",
            f"{e['ratio']:.3f} [{e['low']:.3f}, {e['high']:.3f}]")


RUN_CLAIMS.append(
    (CONTROLLER_PAGE, r"16-31 held (\d+) pair and had dropped (\d+) explorations unpaired; every "
     r"bucket had (\d+) or (\d+) pair against (\d+) to (\d+) dropped, while (\d+)% to (\d+)% of "
     r"each bucket's steps were explorations, paid for and mostly never paired \(k5 / "
     r"controller read (\S+ \[\S+ \S+\]) over these 3 groups\)", top_bucket))


def bucket_visits() -> tuple[str, ...]:
    """`bucket_visits`' 16-31: visits' shortest, longest, median; pairs; explorations
    dropped; then the steps at a k other than their block's, of all, and in %."""
    import statistics

    found = result("bucket-visits-multi-turn-c16")
    top = found["buckets"]["16-31"]
    return (str(found["meta"]["runs"]), str(min(top["visits"])), str(max(top["visits"])),
            f"{statistics.median(top['visits']):.0f}", str(top["pairs"]), str(top["unpaired"]),
            str(found["off_block"]), str(found["steps"]),
            f"{100 * found['off_block'] / found['steps']:.0f}")


RUN_CLAIMS.append(
    (CONTROLLER_PAGE, r"Over (\d+) runs the visits to 16-31 lasted (\d+) to (\d+) steps \(median "
     r"(\d+)\), and it paired (\w+) of its (\d+) explorations\. And (\d+) of (\d+) steps "
     r"\((\d+)%\) ran at a k other", bucket_visits))


def k_changes(trace: list[list]) -> int:
    """Steps of a `bucket_visits` trace at another k than the step before, in one visit (the
    probe's own count, made again from the trace: the file before it lacks the field)."""
    from benchmarks.probes.bucket_visits import summary

    return sum(b["k_changes"] for b in summary([tuple(step) for step in trace]).values())


def write_ahead() -> tuple[str, ...]:
    """`bucket_visits` before (3503048) and after the write ahead (b90a005): runs, steps off
    their block after and before, k changes before and after, the lag, explorations dropped
    in all buckets before and after, 16-31's pairs and drops after and before, its visits."""
    import statistics

    old, new = (result(name) for name in ("bucket-visits-multi-turn-c16",
                                          "bucket-visits-multi-turn-c16-write-ahead"))
    top, was = new["buckets"]["16-31"], old["buckets"]["16-31"]
    dropped = [sum(b["unpaired"] for b in found["buckets"].values()) for found in (old, new)]
    return (str(new["meta"]["runs"]), str(new["off_block"]), str(new["steps"]),
            str(old["off_block"]), str(old["steps"]), str(k_changes(old["trace"])),
            str(k_changes(new["trace"])), f"{new['lookup_lag_steps']:.1f}", str(dropped[0]),
            str(dropped[1]), str(top["pairs"]), str(was["pairs"]), str(top["unpaired"]),
            str(was["unpaired"]), str(min(top["visits"])), str(max(top["visits"])),
            f"{statistics.median(top['visits']):.0f}")


RUN_CLAIMS.append(
    (CONTROLLER_PAGE, r"Over (\d+) runs, (\d+) of (\d+) steps ran at a k other than their "
     r"bucket's block \((\d+) of (\d+) before\), and the steps at a new k \(unsettled, one per "
     r"change\) fell from (\d+) to (\d+)\. The controller measured the lag at ([\d.]+) step\. "
     r"Explorations dropped unpaired fell from (\d+) to (\d+) over the five buckets; 16-31 "
     r"paired (\d+) \((\d+) before\) and dropped (\d+) \((\d+)\), with visits of (\d+) to (\d+) "
     r"steps \(median (\d+)\)", write_ahead))


AHEAD = "controller-runs-steady-c16-c32-uniform-write-ahead"


def within(name: str, share: float = RUN_PAIRS_MARGIN) -> str:
    """Controller cells whose best fixed k's point is at least `share`."""
    return str(sum(best_ratio(c) >= share for c in controller_cells(name)))


def geometric_mean(name: str) -> str:
    import math

    ratios = [best_ratio(c) for c in controller_cells(name)]
    return f"{math.exp(sum(map(math.log, ratios)) / len(ratios)):.3f}"


def cell_of(name: str, workload: str, concurrency: int) -> dict:
    """The run's controller cell of `workload` at `concurrency`."""
    return next(c for c in controller_cells(name)
                if (c["workload"], c["concurrency"]) == (workload, concurrency))


def best_entry(name: str, workload: str, concurrency: int) -> dict:
    """A controller cell's best fixed k: its `against_last` entry with the lowest ratio."""
    cell = cell_of(name, workload, concurrency)
    return min(cell["against_last"].values(), key=lambda e: e["ratio"])


def cell_best(name: str, workload: str, concurrency: int, interval: bool = False) -> str:
    e = best_entry(name, workload, concurrency)
    return f"{e['ratio']:.3f} [{e['low']:.3f}, {e['high']:.3f}]" if interval \
        else f"{e['ratio']:.3f}"


def interval_points(name: str, workload: str, concurrency: int, digits: int = 0) -> str:
    """The width of a cell's best-fixed-k interval, in points (hundredths)."""
    e = best_entry(name, workload, concurrency)
    return f"{100 * (e['high'] - e['low']):.{digits}f}"


def shares_at(name: str, label: str) -> tuple[str, str]:
    """The lowest and highest share of `label`'s steps explored over the run's cells, in %."""
    shares = [c["explore_share"][label] for c in controller_cells(name)]
    return f"{100 * min(shares):.0f}", f"{100 * max(shares):.0f}"


RUN_CLAIMS.extend([
    (CONTROLLER_PAGE, r"\*\*(\d+) of (\d+) cells met\*\* by the interval's low end \("
     r"input_grounded and open_ended at 16\), (\d+) in\s+the run before\. By the point the "
     r"controller is within 2% of the best fixed k in (\d+) of 8\s+cells \((\d+) before\), "
     r"and over the 8 cells the geometric mean of best fixed k / controller rose\s+from "
     r"([\d.]+) to ([\d.]+)\. Against k=0 it is faster in every cell by the point "
     r"\(([\d.]+) to ([\d.]+)\)",
     lambda: (*run_pairs_met(AHEAD), run_pairs_met(C16_C32)[0], within(AHEAD), within(C16_C32),
              geometric_mean(C16_C32), geometric_mean(AHEAD), *k0_range(AHEAD))),
    (CONTROLLER_PAGE, r"The A/A beside it \(k0 against k0, open_ended, c=32, this run\) read "
     r"(\S+ \[\S+ \S+\])\.", lambda: (run_pairs_aa(AHEAD),)),
    (CONTROLLER_PAGE, r"multi_turn still misses, by ([\d.]+)% at c=16 and ([\d.]+)% at c=32\*\* "
     r"\(([\d.]+)% and ([\d.]+)% before\)",
     lambda: losses(AHEAD, "multi_turn") + losses(C16_C32, "multi_turn")),
    (CONTROLLER_PAGE, r"input_grounded reads above 1 by the point in both cells\*\* \(([\d.]+) "
     r"and ([\d.]+), against\s+([\d.]+) and ([\d.]+) before\)",
     lambda: tuple(cell_best(n, "input_grounded", c) for n in (AHEAD, C16_C32)
                   for c in (16, 32))),
    (CONTROLLER_PAGE, r"miss by their interval now\*\*: (\S+\s+\[\S+ \S+\]) and (\S+ \[\S+ \S+\]); "
     r"each earlier point \(([\d.]+) and ([\d.]+)\)",
     lambda: (cell_best(AHEAD, "open_ended", 32, True), cell_best(AHEAD, "mt_bench", 32, True),
              cell_best(C16_C32, "open_ended", 32), cell_best(C16_C32, "mt_bench", 32))),
    (CONTROLLER_PAGE, r"mt_bench at\s+c=16 misses in both runs \(([\d.]+) now, ([\d.]+) before\)",
     lambda: (cell_best(AHEAD, "mt_bench", 16), cell_best(C16_C32, "mt_bench", 16))),
    (CONTROLLER_PAGE, r"The batch-1 bucket explores less \((\d+)-(\d+)% of its steps against "
     r"(\d+)-(\d+)% before\)", lambda: shares_at(AHEAD, "1-1") + shares_at(C16_C32, "1-1")),
])

RUN_CLAIMS.append(
    ("README.md", r"it meets the target in (\d+) of (\d+) cells \((\d+) in the run before\), is "
     r"within 2% by the point in (\d+) of\s+8, and the geometric mean of best fixed k / "
     r"controller rose from ([\d.]+) to ([\d.]+); multi_turn\s+still misses, by ([\d.]+)% and "
     r"([\d.]+)% \(([\d.]+)% and ([\d.]+)% before\)",
     lambda: (*run_pairs_met(AHEAD), run_pairs_met(C16_C32)[0], within(AHEAD),
              geometric_mean(C16_C32), geometric_mean(AHEAD), *losses(AHEAD, "multi_turn"),
              *losses(C16_C32, "multi_turn"))))

C4, C4_AHEAD = "controller-runs-steady-c4-uniform", "controller-runs-steady-c4-uniform-write-ahead"
RUN_CLAIMS.extend([
    (CONTROLLER_PAGE, r"The A/A beside it \(k0 against k0, open_ended, c=4, this run\) read "
     r"(\S+ \[\S+ \S+\])\.", lambda: (run_pairs_aa(C4_AHEAD),)),
    (CONTROLLER_PAGE, r"input_grounded no longer misses at c=4: ([\d.]+)\*\* (\[\S+ \S+\]) against "
     r"fixed k=5 \((\S+ \[\S+ \S+\]) before\)",
     lambda: (cell_best(C4_AHEAD, "input_grounded", 4),
              cell_best(C4_AHEAD, "input_grounded", 4, True).split(" ", 1)[1],
              cell_best(C4, "input_grounded", 4, True))),
    (CONTROLLER_PAGE, r"\*\*(\d+) of (\d+) cells met\*\* by the interval's low end, as before "
     r"\(open_ended then, input_grounded\s+now\).*?geometric mean of best fixed k / controller "
     r"rose from ([\d.]+) to ([\d.]+)\.",
     lambda: (*run_pairs_met(C4_AHEAD), geometric_mean(C4), geometric_mean(C4_AHEAD))),
    (CONTROLLER_PAGE, r"mt_bench \(([\d.]+), an interval (\d+) points wide\) and multi_turn "
     r"\(([\d.]+)\) kept the table's k=2", lambda: (
         cell_best(C4_AHEAD, "mt_bench", 4), interval_points(C4_AHEAD, "mt_bench", 4),
         cell_best(C4_AHEAD, "multi_turn", 4))),
])


RUN_CLAIMS.append(
    ("README.md", r"input_grounded reads (\S+ \[\S+ \S+\]) against fixed k=5 \((\S+ \[\S+ \S+\]) "
     r"before\)", lambda: (cell_best(C4_AHEAD, "input_grounded", 4, True),
                           cell_best(C4, "input_grounded", 4, True))))

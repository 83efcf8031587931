"""The figures of "Priced by their steps" in docs/schedule-controller.md and of the README's
sentence on it, each computed from its result files (`support/doc_claims.py` checks them
against the page): `run_pairs` runs with each arm's runs priced by their engine steps, and
`run_pricing` re-pricings of their step files."""

from __future__ import annotations

import math
from collections.abc import Callable

from support.result_tables import RUN_PAIRS_MARGIN, result
from support.run_figures import CONTROLLER_PAGE, aa_cell, aa_entry, cell_of, controller_cells

STEPPED_C1 = "controller-runs-steady-c1-stepped"
STEPPED_C4 = "controller-runs-steady-c4-stepped"
STEPPED_SHAREGPT = "sharegpt-controller-uniform-stepped"
STEPPED = (STEPPED_C1, STEPPED_C4, STEPPED_SHAREGPT)
"""The runs, in the order the section quotes them."""


def shown(entry: dict) -> str:
    return f"{entry['ratio']:.3f} [{entry['low']:.3f}, {entry['high']:.3f}]"


def best(against: dict) -> dict:
    return min(against.values(), key=lambda e: e["ratio"])


def met(names: tuple[str, ...], priced: bool) -> tuple[str, str]:
    """(cells met, cells): the best fixed arm's interval low at least 0.98, by the priced
    figures or the timed ones."""
    cells = [c for name in names for c in controller_cells(name)]
    count = sum(best(c["priced"]["against_last"] if priced else c["against_last"])["low"]
                >= RUN_PAIRS_MARGIN for c in cells)
    return str(count), str(len(cells))


def aa(name: str) -> tuple[str, str]:
    """The A/A (the controller against itself): timed, priced."""
    cell = aa_cell(name)
    return shown(aa_entry(name)), shown(next(iter(cell["priced"]["against_last"].values())))


def widths(names: tuple[str, ...], priced: bool) -> tuple[str, str]:
    """The narrowest and widest best-fixed-arm interval over the cells, in points, one
    decimal (each figure's own best arm)."""
    found = [100 * (e["high"] - e["low"]) for name in names for c in controller_cells(name)
             for e in [best(c["priced"]["against_last"] if priced else c["against_last"])]]
    return f"{min(found):.1f}", f"{max(found):.1f}"


def inside(names: tuple[str, ...]) -> tuple[str, str, str, str]:
    """(fixed-arm figures whose priced point lies inside the timed interval, all of them,
    those lying above it, those below it)."""
    pairs = [(c["priced"]["against_last"][arm]["ratio"], e) for name in names
             for c in controller_cells(name) for arm, e in c["against_last"].items()]
    within = sum(e["low"] <= p <= e["high"] for p, e in pairs)
    above = sum(p > e["high"] for p, e in pairs)
    below = sum(p < e["low"] for p, e in pairs)
    return str(within), str(len(pairs)), str(above), str(below)


def model_error_range(names: tuple[str, ...]) -> tuple[str, str]:
    """The least and most `model_error_points` over the controller cells, two decimals."""
    points = [c["priced"]["model_error_points"] for name in names
              for c in result(f"{name}-repriced")["cells"] if len(set(c["arms"])) > 1]
    return f"{min(points):.2f}", f"{max(points):.2f}"


def controller_speed(names: tuple[str, ...]) -> tuple[str, str, str]:
    """The controller's runs' measured over priced seconds against the fixed arms' mean, per
    cell: the least and most, in percent with a sign, and their geometric mean."""
    ratios = []
    for name in names:
        for c in controller_cells(name):
            shares = c["priced"]["measured_share"]
            fixed = [v for arm, v in shares.items() if arm != "controller"]
            ratios.append(shares["controller"] / (sum(fixed) / len(fixed)))
    mean = math.exp(sum(map(math.log, ratios)) / len(ratios))
    return (f"{100 * (min(ratios) - 1):+.1f}", f"{100 * (max(ratios) - 1):+.1f}",
            f"{100 * (mean - 1):+.1f}")


def repriced_same(names: tuple[str, ...]) -> str:
    """Whether `run_pricing`'s re-pricing of each run's step file (seconds kept to the
    microsecond) gives every priced figure of the run, point and bounds, within 0.1%."""
    for name in names:
        again = {(c["workload"], c["concurrency"], tuple(c["arms"])): c["priced"]
                 for c in result(f"{name}-repriced")["cells"]}
        for cell in result(name)["cells"]:
            other = again[(cell["workload"], cell["concurrency"], tuple(cell["arms"]))]
            for arm, entry in cell["priced"]["against_last"].items():
                if any(abs(entry[key] / other["against_last"][arm][key] - 1) > 0.001
                       for key in ("ratio", "low", "high")):
                    return "not every"
    return "every"


def slowdowns(names: tuple[str, ...]) -> tuple[str, str, str, str, str]:
    """The controller's run speed against the fixed arms' (`run_pricing.slowdown`): the least
    and most cell mean, in percent with a sign, and pooled over every group of every cell: the
    mean, its 90% normal interval (1.645 standard errors), and the groups."""
    cells = [c["priced"]["run_speed_by_arm"]["controller"] for name in names
             for c in result(f"{name}-repriced")["cells"] if len(set(c["arms"])) > 1]
    means = [100 * (math.exp(c["mean_log"]) - 1) for c in cells]
    values = [v for c in cells for v in c["per_group"]]
    mean = sum(values) / len(values)
    se = math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1) / len(values))
    return (f"{min(means):+.1f}", f"{max(means):+.1f}", f"{100 * mean:+.1f}",
            f"[{100 * (mean - 1.645 * se):+.1f}, {100 * (mean + 1.645 * se):+.1f}]",
            str(len(values)))


def fixed_speeds(names: tuple[str, ...]) -> tuple[str, str]:
    """The fixed arms' run speed against the other fixed arms', per arm and cell: the least
    and most mean, in percent with a sign."""
    means = [100 * (math.exp(v["mean_log"]) - 1) for name in names
             for c in result(f"{name}-repriced")["cells"] if len(set(c["arms"])) > 1
             for arm, v in c["priced"]["run_speed_by_arm"].items() if arm != "controller"]
    return f"{min(means):+.1f}", f"{max(means):+.1f}"


def one_speed_moves(names: tuple[str, ...]) -> tuple[str, str]:
    """How far one speed for every run moves the best fixed arm's priced figure: the least
    and most over the controller cells, in points, one decimal."""
    moves = []
    for name in names:
        again = {(c["workload"], c["concurrency"]): c["priced"]["against_last"]
                 for c in result(f"{name}-one-speed")["cells"] if len(set(c["arms"])) > 1}
        for cell in controller_cells(name):
            against = cell["priced"]["against_last"]
            arm = min(against, key=lambda k: against[k]["ratio"])
            other = again[(cell["workload"], cell["concurrency"])][arm]["ratio"]
            moves.append(abs(100 * (other - against[arm]["ratio"])))
    return f"{min(moves):.1f}", f"{max(moves):.1f}"


def met_list(names: tuple[str, ...]) -> str:
    """The cells the priced figures meet, in file order: `input_grounded 1, ... and
    sharegpt 16`."""
    cells = [f"{c['workload']} {c['concurrency']}" for name in names
             for c in controller_cells(name)
             if best(c["priced"]["against_last"])["low"] >= RUN_PAIRS_MARGIN]
    return ", ".join(cells[:-1]) + f" and {cells[-1]}" if len(cells) > 1 else "".join(cells)


def priced_share(name: str, workload: str, concurrency: int, k: str) -> str:
    """A controller cell's share of its priced seconds at `k` in percent (`name`: the run's
    file, or its re-pricing `NAME-repriced`)."""
    cell = cell_of(name, workload, concurrency)
    return f"{100 * cell['priced']['controller_priced_share_by_k'][k]:.0f}"


def cell_entry(name: str, workload: str, concurrency: int, arm: str, priced: bool) -> str:
    """A controller cell's figure for `arm`, timed or priced, as the docs quote it."""
    cell = cell_of(name, workload, concurrency)
    return shown((cell["priced"] if priced else cell)["against_last"][arm])


STEPPED_CLAIMS: list[tuple[str, str, Callable[[], tuple[str, ...]]]] = [
    (CONTROLLER_PAGE, r"By the priced figures \*\*(\d+) of (\d+) cells met\*\* \((.+?)\), by the "
     r"timed ones (\d+) of (\d+)\. The best fixed arm's priced intervals are ([\d.]+)-([\d.]+) "
     r"points wide, the timed ones ([\d.]+)-([\d.]+)\.",
     lambda: (*met(STEPPED, True), met_list(STEPPED), *met(STEPPED, False),
              *widths(STEPPED, True), *widths(STEPPED, False))),
    (CONTROLLER_PAGE, r"\*\*The A/A\*\*, the controller against itself: at c=1 timed (\S+ \[\S+ "
     r"\S+\]), priced (\S+ \[\S+ \S+\]); at c=4 (\S+ \[\S+ \S+\]) and (\S+ \[\S+ \S+\]); on "
     r"ShareGPT at c=32 (\S+ \[\S+ \S+\]) and (\S+ \[\S+ \S+\])\.",
     lambda: tuple(x for name in STEPPED for x in aa(name))),
    (CONTROLLER_PAGE, r"Of the (\d+) fixed-arm figures the priced point lies inside the timed "
     r"interval in (\d+); the other (\d+) all lie above it",
     lambda: (lambda i: (i[1], i[0], i[2]))(inside(STEPPED))),
    (CONTROLLER_PAGE, r"mt_bench at c=4, where the controller spent (\d+)% of its priced "
     r"seconds at k=2",
     lambda: (priced_share(f"{STEPPED_C4}-repriced", "mt_bench", 4, "k2"),)),
    (CONTROLLER_PAGE, r"gives every priced figure of the three runs within 0\.1% \((every|not "
     r"every) one\)",
     lambda: (repriced_same(STEPPED),)),
    (CONTROLLER_PAGE, r"model_error_points`\) is ([\d.]+)-([\d.]+) points",
     lambda: model_error_range(STEPPED)),
    (CONTROLLER_PAGE, r"moves the best fixed arm's priced figure by ([\d.]+)-([\d.]+) points",
     lambda: one_speed_moves(STEPPED)),
    (CONTROLLER_PAGE, r"per cell (\S+)% to (\S+)%, pooled over (\d+) groups (\S+)% (\[\S+ \S+\])"
     r".*? each fixed arm against the others read (\S+)% to (\S+)% per cell",
     lambda: (*(lambda f: (f[0], f[1], f[4], f[2], f[3]))(slowdowns(STEPPED)),
              *fixed_speeds(STEPPED))),
    ("README.md", r"Against a 2-point target these whole runs resolve (\d+)-(\d+) points",
     lambda: tuple(str(round(float(w))) for w in widths(STEPPED, False))),
    ("README.md", r"priced by its engine steps .*?, (\d+) of (\d+) cells meet it \((\d+) of "
     r"(\d+) timed\)(?s:.*?) read (\S+)% slower than the fixed arms' \(pooled over (\d+) "
     r"groups\), inside the (\S+)% to (\S+)% that fixed arms read",
     lambda: (*met(STEPPED, True), *met(STEPPED, False), *slowdowns(STEPPED)[2:5:2],
              *fixed_speeds(STEPPED))),
]


PRIOR_C4 = "controller-runs-steady-c4-prior"
"""The c=4 run with a bucket's prior the table's k at the batch size it is first seen at."""
C4_BEFORE = ("controller-runs-steady-c4", "controller-runs-steady-c4-tails",
             "controller-runs-steady-c4-uniform", "controller-runs-steady-c4-uniform-write-ahead",
             "controller-runs-steady-c4-uniform-carry", "controller-runs-steady-c4-uniform-priced",
             STEPPED_C4)
"""Every c=4 run on the page before it."""


def kept_before() -> tuple[str, str, str]:
    """(runs, mt_bench's least and most fixed k=5 / controller by the point) over the c=4
    runs before; "seven" only where open_ended's and mt_bench's 4-7 ended at k=2 in each."""
    cells = [c for name in C4_BEFORE for c in controller_cells(name)
             if c["workload"] in ("open_ended", "mt_bench")]
    every = all(c["table_after"]["4-7"] == 2 for c in cells)
    k5 = [c["against_last"]["k5"]["ratio"] for c in cells if c["workload"] == "mt_bench"]
    runs = {7: "seven"}.get(len(C4_BEFORE), str(len(C4_BEFORE))) if every else "not all"
    return runs, f"{min(k5):.3f}", f"{max(k5):.3f}"


def settled_at_5(name: str) -> str:
    """Whether every controller cell ended with 4-7 at k=5 and no switch in any bucket."""
    cells = controller_cells(name)
    return "Every" if all(c["table_after"]["4-7"] == 5 and not any(c["switches"].values())
                          for c in cells) else "Not every"


STEPPED_CLAIMS += [
    (CONTROLLER_PAGE, r"In all (\w+) c=4 runs on this page, open_ended's and mt_bench's 4-7\s+"
     r"kept that k=2 \(mt_bench (\S+)-(\S+) of fixed k=5 by the point\)",
     kept_before),
    (CONTROLLER_PAGE, r"in\s+all (\w+) c=4 runs before, open_ended's and mt_bench's 4-7 never "
     r"left it", lambda: kept_before()[:1]),
    (CONTROLLER_PAGE, r"By the priced figures \*\*(\d) of (\d) cells met\*\*, by the timed ones "
     r"(\d) of (\d) \((\d) of (\d) and (\d) of (\d) in\s+the run before",
     lambda: (*met((PRIOR_C4,), True), *met((PRIOR_C4,), False), *met((STEPPED_C4,), True),
              *met((STEPPED_C4,), False))),
    (CONTROLLER_PAGE, r"(\w+) cell ended with 4-7 at k=5\s+and no switch in any bucket",
     lambda: (settled_at_5(PRIOR_C4),)),
    (CONTROLLER_PAGE, r"fixed k=5 against the controller priced (\S+ \[\S+\s+\S+\]) \((\S+ "
     r"\[\S+\s+\S+\]) before\); the controller spent (\d+)% of its priced seconds at k=2 "
     r"\((\d+)% before\)",
     lambda: (*(cell_entry(name, "mt_bench", 4, "k5", True) for name in (PRIOR_C4, STEPPED_C4)),
              *(priced_share(name, "mt_bench", 4, "k2") for name in (PRIOR_C4, STEPPED_C4)))),
    (CONTROLLER_PAGE, r"\*\*The A/A\*\*, the controller against itself: timed (\S+ \[\S+ \S+\]), "
     r"priced (\S+ \[\S+ \S+\])\.", lambda: aa(PRIOR_C4)),
]
STEPPED_CLAIMS.append(
    ("README.md", r"at c=4 (\d) of (\d) cells meet it priced \((\d) of (\d) timed\)",
     lambda: (*met((PRIOR_C4,), True), *met((PRIOR_C4,), False))))

PRIOR_C16 = "controller-runs-steady-c16-c32-prior"
"""The c=16 and c=32 run priced by its steps, with the prior of `PRIOR_C4`."""


def speed_ranges(name: str) -> tuple[str, str, str, str]:
    """Per cell, the controller's run speed against the fixed arms' (least, most) and the
    fixed arms' against each other (least, most), in percent with a sign."""
    cells = [c["priced"]["run_speed_by_arm"] for c in controller_cells(name)]
    ctl = [100 * (math.exp(c["controller"]["mean_log"]) - 1) for c in cells]
    fixed = [100 * (math.exp(v["mean_log"]) - 1) for c in cells for arm, v in c.items()
             if arm != "controller"]
    return (f"{min(ctl):+.1f}", f"{max(ctl):+.1f}", f"{min(fixed):+.1f}", f"{max(fixed):+.1f}")


STEPPED_CLAIMS += [
    (CONTROLLER_PAGE, r"By the priced figures \*\*(\d) of (\d) cells met\*\*, by the timed ones "
     r"(\d) of (\d) \((\d) of (\d) timed in the run of \"All four workloads at c=16 and c=32 "
     r"with priced pairs\"",
     lambda: (*met((PRIOR_C16,), True), *met((PRIOR_C16,), False),
              *met(("controller-runs-steady-c16-c32-uniform-priced",), False))),
    (CONTROLLER_PAGE, r"The one priced miss is multi_turn at c=16, (\S+ \[\S+ \S+\]) of fixed k=5",
     lambda: (cell_entry(PRIOR_C16, "multi_turn", 16, "k5", True),)),
    (CONTROLLER_PAGE, r"against itself at open_ended c=32: timed (\S+ \[\S+ \S+\]), priced (\S+ "
     r"\[\S+ \S+\])\.", lambda: aa(PRIOR_C16)),
    (CONTROLLER_PAGE, r"of the (\d+) fixed-arm figures the priced point lies inside the timed "
     r"interval in (\d+), above it in (\d+), below it in (\d+)\.",
     lambda: (lambda i: (i[1], i[0], i[2], i[3]))(inside((PRIOR_C16,)))),
    (CONTROLLER_PAGE, r"where fixed k=5 reads (\S+ \[\S+ \S+\]) timed and (\S+ \[\S+ \S+\]) "
     r"priced\.", lambda: (cell_entry(PRIOR_C16, "open_ended", 32, "k5", False),
                           cell_entry(PRIOR_C16, "open_ended", 32, "k5", True))),
    (CONTROLLER_PAGE, r"per cell the controller's runs read (\S+)% to (\S+)% against the fixed "
     r"arms', the fixed arms (\S+)% to (\S+)% against each other \((\S+)% to (\S+)% in the runs "
     r"of \"What the priced figures leave out\" above\)",
     lambda: (*speed_ranges(PRIOR_C16), *fixed_speeds(STEPPED))),
    (CONTROLLER_PAGE, r"by the priced figures (\d+) of (\d+) cells at c=4, 16 and 32 meet",
     lambda: tuple(str(sum(int(x) for x in col)) for col in zip(
         met((PRIOR_C4,), True), met((PRIOR_C16,), True), strict=True))),
]

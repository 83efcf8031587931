"""The figures of "Priced by their steps" in docs/schedule-controller.md and of the README's
sentence on it, each computed from its result files (`support/doc_claims.py` checks them
against the page): `run_pairs` runs with each arm's runs priced by their engine steps, and
`run_pricing` re-pricings of their step files."""

from __future__ import annotations

import math
from collections.abc import Callable

from support.result_tables import RUN_PAIRS_MARGIN, result
from support.run_figures import CONTROLLER_PAGE, aa_entry, controller_cells

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
    cell = next(c for c in result(name)["cells"] if len(set(c["arms"])) == 1)
    return shown(aa_entry(name)), shown(next(iter(cell["priced"]["against_last"].values())))


def widths(names: tuple[str, ...], priced: bool) -> tuple[str, str]:
    """The narrowest and widest best-fixed-arm interval over the cells, in points, one
    decimal (each figure's own best arm)."""
    found = [100 * (e["high"] - e["low"]) for name in names for c in controller_cells(name)
             for e in [best(c["priced"]["against_last"] if priced else c["against_last"])]]
    return f"{min(found):.1f}", f"{max(found):.1f}"


def inside(names: tuple[str, ...]) -> tuple[str, str, str]:
    """(fixed-arm figures whose priced point lies inside the timed interval, all of them,
    those outside lying above it)."""
    pairs = [(c["priced"]["against_last"][arm]["ratio"], e) for name in names
             for c in controller_cells(name) for arm, e in c["against_last"].items()]
    within = sum(e["low"] <= p <= e["high"] for p, e in pairs)
    above = sum(p > e["high"] for p, e in pairs)
    return str(within), str(len(pairs)), str(above)


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
    """A controller cell's share of its priced seconds at `k` (the re-pricing), in percent."""
    cell = next(c for c in result(f"{name}-repriced")["cells"]
                if (c["workload"], c["concurrency"]) == (workload, concurrency)
                and len(set(c["arms"])) > 1)
    return f"{100 * cell['priced']['controller_priced_share_by_k'][k]:.0f}"


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
     lambda: (priced_share(STEPPED_C4, "mt_bench", 4, "k2"),)),
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

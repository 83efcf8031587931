"""The figures of "One price for a drafted token" in docs/schedule-controller.md and of the
README's sentence on it, each computed from its result files (`support/doc_claims.py` checks
them against the page): the fixed arms' own steps, the replay files of the shape runs (made by
the code that ran them, with the table's price and the fit kept), and the c=4 run with it."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from support.replay_figures import by_kind
from support.result_tables import result
from support.run_figures import CONTROLLER_PAGE, aa_cell, cell_of, controller_cells
from support.shape_figures import SHAPE_C4, WARM_C4
from support.stepped_figures import aa, cell_entry, met, met_list
from vllm_specdec_plugin.core.pair_price import Counts, Measure, counted_times, draft_time

PRICED_C4 = "controller-runs-steady-c4-priced-warm"
"""c=4, four workloads, ten minutes of warm-up, with the fit's price (5f1cf81)."""
STALL_S = 0.5
"""Steps this long or longer are left out of the regressions (a stall, a JIT compile)."""


def regression(name: str, one_row: bool, switch: bool) -> np.ndarray:
    """Least squares of the fixed arms' decode steps (k=0, 2, 5) in the controller cell of run
    `name`: at batch 1 seconds on (1, drafted), at 2-3 on (1, batch, drafted), each with a
    term for a step that drafts at all where `switch`. Coefficients in ms."""
    cell = by_kind(result(f"{name}.steps")["cells"])[0]
    rows = [(batch, drafted, seconds) for group in cell["steps"] for arm in ("k0", "k2", "k5")
            for batch, drafted, prefill, seconds, _ in group[arm]["steps"]
            if not prefill and seconds < STALL_S and (batch == 1 if one_row else batch in (2, 3))]
    found = np.array(rows, dtype=np.float64)
    columns = [np.ones(len(found))] + ([] if one_row else [found[:, 0]]) + [found[:, 1]]
    if switch:
        columns.append((found[:, 1] > 0).astype(np.float64))
    fitted, *_ = np.linalg.lstsq(np.column_stack(columns), found[:, 2], rcond=None)
    return 1000 * fitted


def step_prices() -> tuple[str, ...]:
    """The warm run's steps: a drafted token at 1-1 and at 2-3, then with a switch term the
    switch at 1-1 and at 2-3, in ms."""
    plain = [regression(WARM_C4, one, False)[-1] for one in (True, False)]
    switches = [regression(WARM_C4, one, True)[-1] for one in (True, False)]
    return tuple(f"{x:.1f}" for x in (*plain, *switches))


def table_prices() -> tuple[str, ...]:
    """At 2-3 at the end of each shape run's controller-cell replay: the table's price of a
    drafted token, then the fit's (the 120 s run, the 600 s run), in ms."""
    cells = [by_kind(result(f"{name}-replay")["cells"])[0]["prices"]["2-3"]
             for name in (SHAPE_C4, WARM_C4)]
    return (*(f"{1000 * c['drafting_price'][1]:.1f}" for c in cells),
            *(f"{1000 * c['fit'][2]:.1f}" for c in cells))


def measure(block: dict, price: float) -> Measure:
    counts = block["counts"]
    return Measure(block["yields"], block["time"], block["rows"], block["steps"],
                   block["drafting"], 0.0, Counts(counts["drafting"], counts["tokens"], {
                       int(k): v for k, v in counts["shorter"].items()}, price))


def repriced_gain(name: str, fitted: bool) -> float:
    """Over 2-3's counted pairs of k=2 and k=5 in the controller cell's replay of run `name`,
    k=2's gain over k=5 on the pairs' texts (a ratio of sums of `counted_times`), each block
    priced as the run priced it, or (`fitted`) by the fit at the run's end (`draft_time` at
    the fit's price of a drafted token, over its shape)."""
    cell = by_kind(result(f"{name}-replay")["cells"])[0]
    base, per_row, per_draft = cell["prices"]["2-3"]["fit"]
    at_two = base + 2 * per_row
    sums = [0.0, 0.0]  # k=5's time, k=2's
    for pair in cell["pairs"]:
        if pair["bucket"] != "2-3" or not pair["counted"] or {pair["arm"],
                                                               pair["incumbent"]} != {2, 5}:
            continue
        before, explored, after = pair["blocks"]
        blocks = []
        for block, k in ((explored, pair["arm"]), (before, pair["incumbent"]),
                         (after, pair["incumbent"])):
            batch = block["rows"] / block["steps"]
            price = draft_time(k, batch, block["drafting"] / block["steps"],
                               (0.0, per_draft), (base + per_row * batch) / at_two
                               ) if fitted else block["counts"]["price"]
            blocks.append(measure(block, price))
        times = counted_times(pair["arm"], pair["incumbent"], *blocks)
        assert times is not None
        incumbent, explored_time, _ = times
        k5, k2 = (incumbent, explored_time) if pair["arm"] == 2 else (explored_time, incumbent)
        sums[0] += k5
        sums[1] += k2
    return sums[0] / sums[1] - 1.0


def repriced() -> tuple[str, ...]:
    """k=2 over k=5 at 2-3 as run (the 120 s run, the 600 s run), then at the fit's price, in
    percent."""
    return tuple(f"{100 * repriced_gain(name, fitted):+.1f}"
                 for fitted in (False, True) for name in (SHAPE_C4, WARM_C4))


def k2_leads() -> tuple[str, str]:
    """Over the run's controller cells, fixed k=2's lead over fixed k=5 (priced, each against
    the controller), least and most, in percent."""
    leads = [100 * (c["priced"]["against_last"]["k5"]["ratio"]
                    / c["priced"]["against_last"]["k2"]["ratio"] - 1)
             for c in controller_cells(PRICED_C4)]
    return f"{min(leads):.0f}", f"{max(leads):.0f}"


def estimate(workload: str, label: str, arm: str) -> tuple[str, str]:
    found = cell_of(PRICED_C4, workload, 4)["estimates"][label][arm]
    return f"{100 * found['gain']:.1f}", f"{100 * found['low']:.1f}"


def explored_range() -> tuple[str, str]:
    shares = [s for c in controller_cells(PRICED_C4) for s in c["explore_share"].values()]
    return f"{100 * min(shares):.0f}", f"{100 * max(shares):.0f}"


def replay_end() -> tuple[str, str, str]:
    cells = result(f"{PRICED_C4}-replay")["cells"]
    prices = [1000 * p["drafting_price"][1] for c in cells for p in c["prices"].values()]
    exact = all(c["replay_exact"] for c in cells)
    return ("ends exactly" if exact else "does not end"), f"{min(prices):.1f}", \
        f"{max(prices):.1f}"


PRICE_CLAIMS: list[tuple[str, str, Callable[[], tuple[str, ...]]]] = [
    (CONTROLLER_PAGE, r"the fixed arms' own decode steps in the 600 s run price a drafted token "
     r"at ([\d.]+) ms at 1-1 and ([\d.]+) ms at 2-3; with a term for a step that drafts at all, "
     r"that term reads ([\d.]+) and ([\d.]+) ms", step_prices),
    (CONTROLLER_PAGE, r"the table priced a drafted token at ([\d.]+) and ([\d.]+) ms \(the 120 s "
     r"and the 600 s run\), the fit ([\d.]+) and ([\d.]+) ms", table_prices),
    (CONTROLLER_PAGE, r"k=2's counted gain over k=5 read (\S+)% and (\S+)% as the runs priced "
     r"it, (\S+)% and (\S+)% at the fit's price", repriced),
    (CONTROLLER_PAGE, r"By the priced figures \*\*(\d+) of (\d+) cells met\*\* \(([^)]+)\), by the "
     r"timed ones (\d+) of (\d+)\. On this host fixed k=2 now leads the prior k=5 by (\d+)-(\d+)%",
     lambda: (*met((PRICED_C4,), True), met_list((PRICED_C4,)), *met((PRICED_C4,), False),
              *k2_leads())),
    (CONTROLLER_PAGE, r"input_grounded's 1-1 read k=2 \+([\d.]+)% with the switch's bound at "
     r"\+([\d.]+)%", lambda: estimate("input_grounded", "1-1", "k2")),
    (CONTROLLER_PAGE, r"At multi_turn 1-1 moved to k=2 at its (\d+)th measured step",
     lambda: (str(cell_of(PRICED_C4, "multi_turn", 4)["history"]["1-1"][0][0]),)),
    (CONTROLLER_PAGE, r"The controller pays (\d+)-(\d+)% of each bucket's steps in exploration",
     explored_range),
    (CONTROLLER_PAGE, r"\*\*The A/A\*\*, the controller against itself at input_grounded c=4: "
     r"timed (\S+ \[\S+ \S+\]), priced (\S+ \[\S+ \S+\]); its controller moved 1-1 to k=2 at "
     r"its (\d+)th measured step",
     lambda: (*aa(PRICED_C4), str(aa_cell(PRICED_C4)["history"]["1-1"][0][0]))),
    (CONTROLLER_PAGE, r"every cell's replay, the A/A's included, (ends exactly) where the run did "
     r".* reads ([\d.]+)-([\d.]+) ms in every bucket", replay_end),
    ("README.md", r"fixed k=2 against the controller read (\S+ \[\S+ \S+\]) and (\S+ \[\S+ "
     r"\S+\]) priced at input_grounded and mt_bench", lambda: tuple(
         cell_entry(PRICED_C4, w, 4, "k2", True) for w in ("input_grounded", "mt_bench"))),
]

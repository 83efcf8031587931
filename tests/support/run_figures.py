"""The figures of `run_pairs` and `step_trace` result files as the docs' prose quotes them
(`support/doc_claims.py`)."""

from __future__ import annotations

from support.result_tables import RUN_PAIRS_MARGIN, result


def run_pairs_met(name: str) -> tuple[str, str]:
    """(met, cells): controller cells whose best fixed k's interval low is at least 0.98."""
    cells = [c for c in result(name)["cells"] if c["arms"][-1] == "controller"]
    met = sum(min(c["against_last"].values(), key=lambda e: e["ratio"])["low"]
              >= RUN_PAIRS_MARGIN for c in cells)
    return str(met), str(len(cells))


def best_k_range(name: str) -> tuple[str, str]:
    """The lowest and highest best-fixed-k ratio over the run's controller cells."""
    best = [min(e["ratio"] for e in c["against_last"].values())
            for c in result(name)["cells"] if c["arms"][-1] == "controller"]
    return f"{min(best):.3f}", f"{max(best):.3f}"


def run_pairs_aa(name: str) -> str:
    """The run's A/A cell (one arm against itself) as the docs quote it."""
    cell = next(c for c in result(name)["cells"] if c["arms"][-1] != "controller")
    e = next(iter(cell["against_last"].values()))
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

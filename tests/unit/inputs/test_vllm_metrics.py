"""The one reader of `/metrics` (`inputs/vllm_metrics.py`): the parser, sums, labelled gauges,
the acceptance formulas, and the parser checked against `prometheus_client`'s on valid text."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.examples import examples

from vllm_specdec_plugin.inputs.vllm_metrics import (
    ACCEPTED,
    DRAFTS,
    GENERATION_TOKENS,
    PROMPT_TOKENS,
    acceptance_rate,
    counter_sums,
    gauge_values,
    mean_acceptance_length,
    metric_sum,
    parse_metrics,
    per_position_acceptance,
    read_counters,
)

# vLLM 0.32's shape: HELP/TYPE lines, counters with _total and _created samples, engine labels.
VLLM_TEXT = """\
# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 8.0
vllm:spec_decode_num_drafts_total{engine="1",model_name="m"} 2.0
vllm:spec_decode_num_drafts_created{engine="0",model_name="m"} 1.7960562566850858e+09
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="m"} 24.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="0"} 7.0
vllm:generation_tokens_total{engine="0",model_name="m"} 40.0
# HELP vllm_specdec_schedule_k k in force per batch bucket
# TYPE vllm_specdec_schedule_k gauge
vllm_specdec_schedule_k{batch_bucket="1-1"} 5.0
vllm_specdec_schedule_k{batch_bucket="2-3"} 3.0
vllm_specdec_schedule_gain{batch_bucket="1-1",k="5"} 1.4
"""


def test_parse_prometheus_text() -> None:
    samples = parse_metrics(
        '# HELP x y\nplain 3\nwith_ts{a="1"} 2.5 1700000000000\n'
        'esc{q="say \\"hi\\"",b="a\\\\b",n="x\\ny"} 1\n'
        "broken{a=1} 4\nno_value\n  \nspaced{ a=\"1\" , } +Inf\n")
    by_name = {s.name: s for s in samples}
    assert set(by_name) == {"plain", "with_ts", "esc", "spaced"}
    assert by_name["plain"].value == 3 and by_name["with_ts"].labels == {"a": "1"}
    assert by_name["with_ts"].value == 2.5
    assert by_name["esc"].labels == {"q": 'say "hi"', "b": "a\\b", "n": "x\ny"}
    assert by_name["spaced"].value == float("inf")


def test_sums_over_label_sets() -> None:
    samples = parse_metrics(VLLM_TEXT)
    assert metric_sum(samples, DRAFTS) == 10.0
    assert counter_sums(samples, [DRAFTS, ACCEPTED, GENERATION_TOKENS, PROMPT_TOKENS]) == {
        DRAFTS: 10.0, ACCEPTED: 24.0, GENERATION_TOKENS: 40.0, PROMPT_TOKENS: 0.0}


def test_labelled_gauges_by_their_labels() -> None:
    samples = parse_metrics(VLLM_TEXT)
    assert gauge_values(samples, "vllm_specdec_schedule_k", ["batch_bucket"]) == {
        ("1-1",): 5.0, ("2-3",): 3.0}
    assert gauge_values(samples, "vllm_specdec_schedule_gain", ["batch_bucket", "k"]) == {
        ("1-1", "5"): 1.4}
    assert gauge_values(samples, "vllm_specdec_schedule_k", ["missing"]) == {("",): 3.0}


def test_counters_of_a_scrape() -> None:
    counters = read_counters(parse_metrics(VLLM_TEXT))
    assert counters.speculation and counters.engine_stats and counters.decision is None
    assert (counters.drafts, counters.accepted_tokens, counters.per_position) == (10, 24, (7.0,))


STEP_COST_TEXT = """\
vllm_specdec_step_cost_seconds{batch_bucket="16-31",model_name="m",part="no_draft"} 0.02
vllm_specdec_step_cost_seconds{batch_bucket="16-31",model_name="m",part="switch"} 0.001
vllm_specdec_step_cost_seconds{batch_bucket="16-31",model_name="m",part="per_token"} 2e-4
vllm_specdec_step_cost_rows{batch_bucket="16-31",model_name="m"} 17.5
vllm_specdec_step_cost_seconds{batch_bucket="2-3",model_name="m",part="no_draft"} 0.01
vllm_specdec_step_cost_seconds{batch_bucket="2-3",model_name="m",part="switch"} 0.0
vllm_specdec_step_cost_seconds{batch_bucket="2-3",model_name="m",part="per_token"} 0.0008
vllm_specdec_step_cost_rows{batch_bucket="2-3",model_name="m"} 2
"""


def test_step_cost_gauges_read_back_per_bucket() -> None:
    from vllm_specdec_plugin.core.step_cost import BucketCost

    counters = read_counters(parse_metrics(STEP_COST_TEXT))
    assert counters.step_costs == (("2-3", BucketCost(0.01, 0.0, 0.0008, 2.0)),
                                   ("16-31", BucketCost(0.02, 0.001, 2e-4, 17.5)))
    assert counters.drafts == 0 and not counters.speculation  # not counted as anything else


@pytest.mark.parametrize("bad", [
    'vllm_specdec_step_cost_seconds{batch_bucket="2-3",part="per_token"} NaN',  # not a number
    'vllm_specdec_step_cost_seconds{batch_bucket="2-3",part="per_token"} -0.5',  # negative
    'vllm_specdec_step_cost_seconds{batch_bucket="2-3",part="per_token"} +Inf',
    'vllm_specdec_step_cost_seconds{batch_bucket="2-3",part="other"} 0.1',  # a part missing
    'vllm_specdec_step_cost_junk{batch_bucket="2-3",part="per_token"} 0.1',
])
def test_a_bucket_with_a_bad_or_missing_part_is_left_out(bad: str) -> None:
    text = "\n".join(line for line in STEP_COST_TEXT.splitlines()
                     if not ('"2-3"' in line and "per_token" in line)) + "\n" + bad + "\n"
    assert [label for label, _ in read_counters(parse_metrics(text)).step_costs] == ["16-31"]


def test_step_cost_rows_below_one_and_samples_are_bounded() -> None:
    text = STEP_COST_TEXT.replace("} 17.5", "} 0.5")
    assert [label for label, _ in read_counters(parse_metrics(text)).step_costs] == ["2-3"]
    flood = "".join(f'vllm_specdec_step_cost_rows{{batch_bucket="{i}-{i}"}} 2\n'
                    + "".join(f'vllm_specdec_step_cost_seconds{{batch_bucket="{i}-{i}",'
                              f'part="{part}"}} 1\n'
                              for part in ("no_draft", "switch", "per_token"))
                    for i in range(3000))
    assert 0 < len(read_counters(parse_metrics(flood)).step_costs) <= 4096 // 4
    # samples of no part this reader knows take none of that room
    junk = "".join(f'vllm_specdec_step_cost_seconds{{batch_bucket="2-3",part="x{i}"}} 1\n'
                   for i in range(5000))
    assert len(read_counters(parse_metrics(junk + STEP_COST_TEXT)).step_costs) == 2


@pytest.mark.parametrize(("accepted", "draft_tokens", "drafts", "rate", "length"), [
    (24, 40, 8, 0.6, 4.0),
    (0, 0, 0, None, None),
    (1e300, 1e-300, 1e-300, None, None),  # overflows to infinity: not a figure
])
def test_acceptance_formulas(accepted: float, draft_tokens: float, drafts: float,
                             rate: float | None, length: float | None) -> None:
    assert acceptance_rate(accepted, draft_tokens) == rate
    assert mean_acceptance_length(accepted, drafts) == length


def test_per_position_acceptance() -> None:
    assert per_position_acceptance((7.0, 6.0, 2.0), 8) == [0.875, 0.75, 0.25]
    assert per_position_acceptance((7.0,), 0) == []
    assert per_position_acceptance((1e300,), 1e-300) == [0.0]


# --- the same samples as prometheus_client's parser on valid text ---------------------------

NAMES = st.from_regex(r"[a-zA-Z_:][a-zA-Z0-9_:]{0,24}", fullmatch=True)
LABEL_NAMES = st.from_regex(r"[a-zA-Z][a-zA-Z0-9_]{0,12}", fullmatch=True)
LABEL_VALUES = st.text(st.characters(exclude_categories=("Cs",)), max_size=12)
VALUES = st.one_of(st.integers(-(10**15), 10**15).map(str),
                   st.floats(allow_nan=False).map(repr).map(
                       lambda v: {"inf": "+Inf", "-inf": "-Inf"}.get(v, v)))


def escaped(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


@st.composite
def exposition(draw: st.DrawFn) -> tuple[str, list[tuple[str, dict[str, str], float]]]:
    lines, expected = [], []
    for _ in range(draw(st.integers(1, 6))):
        name = draw(NAMES)
        labels = draw(st.dictionaries(LABEL_NAMES, LABEL_VALUES, max_size=4))
        value = draw(VALUES)
        stamp = draw(st.sampled_from(["", " 1700000000000"]))
        body = ",".join(f'{key}="{escaped(text)}"' for key, text in labels.items())
        lines.append(f"{name}{{{body}}} {value}{stamp}" if labels or draw(st.booleans())
                     else f"{name} {value}{stamp}")
        expected.append((name, labels, float(value)))
    return "\n".join(lines) + "\n", expected


def library_samples(text: str) -> list[tuple[str, dict[str, str], float]]:
    parser = pytest.importorskip("prometheus_client.parser")
    return [(sample.name, dict(sample.labels), float(sample.value))
            for family in parser.text_string_to_metric_families(text)
            for sample in family.samples]


def ours(text: str) -> list[tuple[str, dict[str, str], float]]:
    return [(sample.name, dict(sample.labels), sample.value) for sample in parse_metrics(text)]


def test_vllm_text_reads_as_prometheus_client_reads_it() -> None:
    assert ours(VLLM_TEXT) == library_samples(VLLM_TEXT)


@settings(max_examples=examples(200), deadline=None)
@given(exposition())
def test_valid_text_reads_as_prometheus_client_reads_it(case) -> None:
    text, expected = case
    assert ours(text) == library_samples(text) == expected

"""Property-based tests (hypothesis) over the parsers and the decision."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from conftest import release_caps
from hypothesis import given, settings
from hypothesis import strategies as st
from support.examples import examples

from vllm_specdec_plugin.core.decide import decide
from vllm_specdec_plugin.core.errors import SpecDecodeConfigError
from vllm_specdec_plugin.core.rules import needs_native_target
from vllm_specdec_plugin.core.settings import ANNOTATION_KEY
from vllm_specdec_plugin.core.types import Annotation, EngineRequest, KaitoRequest
from vllm_specdec_plugin.inputs.annotations import parse_annotations, unquote_go
from vllm_specdec_plugin.inputs.inference_config import parse_inference_config
from vllm_specdec_plugin.inputs.presets import builtin_preset_table

VLLM = ("0.32.0", {"ngram", "suffix", "eagle", "eagle3", "medusa", "mtp", "draft_model"},
        {"eagle", "eagle3", "mtp", "draft_model"})
CAPS = [release_caps(p, *VLLM) for p in ("cpu", "cuda", "rbln")]
CAPS += [replace(CAPS[1], vllm_serves_target=False), replace(CAPS[1], vllm_serves_target=True)]
PRESETS = builtin_preset_table()
json_scalars = st.one_of(st.none(), st.booleans(), st.integers(-3, 64), st.text(max_size=12))
spec_configs = st.dictionaries(
    st.sampled_from(["method", "model", "num_speculative_tokens", "prompt_lookup_max",
                     "prompt_lookup_min", "x"]),
    st.one_of(json_scalars, st.sampled_from(["ngram", "suffix", "eagle", "mtp", "medusa"])),
    max_size=5)
annotations = st.one_of(st.none(), st.sampled_from(["true", "false"]), st.text(max_size=20))
engines = st.builds(
    EngineRequest,
    model=st.one_of(st.none(), st.sampled_from(["Qwen/Qwen3.5-4B", "a/b", "/m/x"])),
    served_model_names=st.lists(st.text(max_size=8), max_size=2).map(tuple),
    speculative_config=st.one_of(st.none(), spec_configs),
    model_impl=st.sampled_from([None, "auto", "vllm", "transformers"]),
    async_scheduling=st.sampled_from([None, True, False]),
)


def go_quote(text: str) -> str:
    """What Go's strconv.Quote produces: JSON's escapes, and \\u escapes for what is not
    printable (a raw U+0085 or U+2028 would otherwise split the kubelet's line)."""
    quoted = json.dumps(text, ensure_ascii=False)
    return "".join(ch if ch.isprintable() else
                   (f"\\u{ord(ch):04x}" if ord(ch) <= 0xFFFF else f"\\U{ord(ch):08x}")
                   for ch in quoted)


@given(st.text(max_size=200))
def test_go_quote_round_trip(text):
    assert unquote_go(go_quote(text)) == text


@given(st.text(max_size=300))
def test_annotations_parser_never_crashes(text):
    """Any text: a dict of our keys or our error naming the file, nothing else."""
    try:
        result = parse_annotations(text, "f", (ANNOTATION_KEY,))
    except SpecDecodeConfigError as exc:
        assert "f:" in exc.message or "appears twice" in exc.message
    else:
        assert set(result) <= {ANNOTATION_KEY}


other_lines = st.lists(st.tuples(st.sampled_from(["kubernetes.io/config.seen", "a", "x/y"]),
                                 st.text(max_size=20)).map(lambda kv: f"{kv[0]}={go_quote(kv[1])}"),
                       max_size=3)


@given(st.text(max_size=40), other_lines, other_lines)
def test_annotations_file_gives_back_what_the_kubelet_wrote(value, before, after):
    """Our key written as the kubelet writes it, among other lines, always reads back exactly."""
    text = "\n".join([*before, f"{ANNOTATION_KEY}={go_quote(value)}", *after])
    assert parse_annotations(text, "f", (ANNOTATION_KEY,)) == {ANNOTATION_KEY: value}


def quoted(value: str) -> bool:
    value = value.strip()
    return len(value) > 1 and value[0] == value[-1] == '"'


@given(st.text(max_size=40).filter(lambda v: len(v.splitlines()) <= 1 and not quoted(v)),
       other_lines)
def test_annotations_file_unquoted_value_is_refused_with_file_and_line(value, before):
    text = "\n".join([*before, f"{ANNOTATION_KEY}={value}"])
    line = len(before) + 1
    with pytest.raises(SpecDecodeConfigError, match=f"f:{line} "):
        parse_annotations(text, "f", (ANNOTATION_KEY,))


@given(st.text(max_size=300))
def test_inference_config_parser_never_crashes(text):
    """Any text: a config or our error naming the file (any other exception fails the test)."""
    try:
        config = parse_inference_config(text, "c.yaml")
    except SpecDecodeConfigError as exc:
        assert "c.yaml" in exc.message
    else:
        assert config.path == "c.yaml" and isinstance(config.vllm, dict)


@given(st.dictionaries(st.sampled_from(["max-model-len", "enforce-eager", "x"]), json_scalars,
                       max_size=3),
       st.one_of(st.none(), spec_configs))
def test_inference_config_speculative_config_read_back(flags, spec):
    """A well-formed file gives back its flags and its speculative config, as a JSON string or
    as a mapping."""
    import yaml

    section = dict(flags)
    if spec is not None:
        section["speculative-config"] = json.dumps(spec)
    config = parse_inference_config(yaml.safe_dump({"vllm": section}), "c.yaml")
    assert dict(config.vllm) == section
    assert config.speculative_config == (None if spec is None else spec)
    if spec is not None:
        section["speculative-config"] = spec
        config = parse_inference_config(yaml.safe_dump({"vllm": section}), "c.yaml")
        assert config.speculative_config == spec


@settings(max_examples=examples(300))
@given(annotations, engines, st.sampled_from(CAPS), st.one_of(st.none(), spec_configs))
def test_decision_invariants(annotation, engine, caps, file_config):
    kaito = KaitoRequest(Annotation(annotation, "t"), config_speculative_config=file_config)
    decision = decide(kaito, engine, caps, PRESETS)
    if annotation in (None, "false"):  # not opted in: no change at all
        assert not decision.enabled and not decision.errors and not decision.warnings
        assert decision.speculative_config is None and decision.model_impl is None
        return
    if annotation != "true":
        assert decision.errors and not decision.enabled
        return
    if decision.enabled:  # the user's model_impl, but where RBLN or the method needs "vllm"
        asked = engine.model_impl or "auto"
        # A method needing vLLM's own target keeps "auto" where vLLM's registry lists the
        # architecture ("auto" resolves to the same class there).
        forced = caps.vllm_model_impl_only is not None or (
            needs_native_target(decision.method)
            and not (asked == "auto" and caps.vllm_serves_target))
        assert decision.model_impl == ("vllm" if forced else asked)
        said = [w for w in decision.warnings if w.startswith("model_impl ")]
        assert len(said) == (decision.model_impl != asked)  # every change said, once
        user = engine.speculative_config if engine.speculative_config is not None else (
            file_config)
        if user is not None:  # the user's config is never changed (but for RBLN's token cap)
            capped = [w for w in decision.warnings if "num_speculative_tokens" in w]
            if not capped:
                assert decision.speculative_config == user
    else:
        assert decision.errors

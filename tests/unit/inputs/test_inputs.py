"""Parsers and readers: the downward-API annotations and inference_config.yaml."""

from __future__ import annotations

import pytest

from vllm_specdec_plugin.core.errors import SpecDecodeConfigError
from vllm_specdec_plugin.core.settings import ANNOTATION_KEY, RUNTIME_KEY
from vllm_specdec_plugin.inputs.annotations import parse_annotations, read_annotation, unquote_go
from vllm_specdec_plugin.inputs.inference_config import (
    load_inference_config,
    parse_inference_config,
    parse_speculative_config,
)

KEYS = (ANNOTATION_KEY, RUNTIME_KEY)


@pytest.mark.parametrize(
    ("quoted", "expected"),
    [('"true"', "true"), ('"a\\"b"', 'a"b'), ('"back\\\\slash"', "back\\slash"),
     ('"line\\nbreak"', "line\nbreak"), ('"caf\\u00e9"', "café"), ('"café"', "café"),
     ('"\\x41"', "A"), ('"\\U0001F600"', "\U0001f600"), ('""', "")],
)
def test_unquote_go(quoted, expected):
    assert unquote_go(quoted) == expected


@pytest.mark.parametrize("bad", ["true", '"open', '"a"b"', '"\\q"', '"\\u12"', '"end\\'])
def test_unquote_go_rejects(bad):
    with pytest.raises(ValueError):
        unquote_go(bad)


def test_parse_annotations_kubelet_file():
    text = ('kaito.sh/enable-speculative-decoding="true"\n'
            'kaito.sh/runtime="vllm"\n'
            'kubernetes.io/config.seen="2026-11-30T03:46:00Z"\n'
            'other=broken line without quotes\n')
    assert parse_annotations(text, "f", KEYS) == {ANNOTATION_KEY: "true", RUNTIME_KEY: "vllm"}


def test_malformed_line_of_our_key_names_file_and_line():
    with pytest.raises(SpecDecodeConfigError, match=r"f:2 .*not a valid downward-API value"):
        parse_annotations(f'a="b"\n{ANNOTATION_KEY}=true\n', "f", KEYS)


def test_conflicting_duplicate_is_an_error_identical_is_not():
    assert parse_annotations(f'{ANNOTATION_KEY}="true"\n' * 2, "f", KEYS)[ANNOTATION_KEY] == "true"
    with pytest.raises(SpecDecodeConfigError, match="appears twice"):
        parse_annotations(f'{ANNOTATION_KEY}="true"\n{ANNOTATION_KEY}="false"\n', "f", KEYS)


def test_env_wins_over_file(tmp_path):
    path = tmp_path / "annotations"
    path.write_text(f'{ANNOTATION_KEY}="false"\n')
    env = {"KAITO_ANNOTATIONS_FILE": str(path)}
    assert read_annotation(env, ANNOTATION_KEY, "E").value == "false"
    assert read_annotation({**env, "E": "true"}, ANNOTATION_KEY, "E").value == "true"


@pytest.mark.parametrize("kind", ["missing", "directory"])
def test_default_file_missing_or_unreadable_means_absent(tmp_path, monkeypatch, kind):
    default = tmp_path / "annotations"
    if kind == "directory":
        default.mkdir()
    monkeypatch.setattr("vllm_specdec_plugin.inputs.annotations.DEFAULT_ANNOTATIONS_FILE",
                        str(default))
    annotation = read_annotation({"KAITO_ANNOTATIONS_FILE": ""}, ANNOTATION_KEY, "E")
    assert annotation.value is None and str(default) in annotation.source


@pytest.mark.parametrize("kind", ["missing", "directory"])
def test_explicit_annotations_file_that_cannot_be_read(tmp_path, kind):
    path = tmp_path / "ann"
    if kind == "directory":
        path.mkdir()
    with pytest.raises(SpecDecodeConfigError, match="KAITO_ANNOTATIONS_FILE"):
        read_annotation({"KAITO_ANNOTATIONS_FILE": str(path)}, ANNOTATION_KEY, "E")


def test_inference_config_json_string_and_mapping():
    text = "vllm:\n  speculative-config: '{\"method\":\"ngram\",\"num_speculative_tokens\":8}'\n"
    assert parse_inference_config(text, "c").speculative_config == {
        "method": "ngram", "num_speculative_tokens": 8}
    text = "vllm:\n  speculative-config:\n    method: ngram\n    prompt-lookup-max: 6\n"
    assert parse_inference_config(text, "c").speculative_config == {
        "method": "ngram", "prompt_lookup_max": 6}
    assert parse_inference_config("vllm:\n  max-model-len: 10\n", "c").speculative_config is None
    assert parse_inference_config("", "c").speculative_config is None


@pytest.mark.parametrize(
    ("text", "match"),
    [("vllm: [\n", r"c:\d+ is not valid YAML"),
     ("!!python/object:os.system {}\n", "not valid YAML"),
     ("- a\n- b\n", "must be a YAML mapping"),
     ("vllm: 3\n", "must be a mapping of vLLM flags"),
     ("vllm:\n  speculative-config: '{bad json'\n", "not valid JSON"),
     ("vllm:\n  speculative-config: 5\n", "must be a JSON object"),
     ("vllm:\n  speculative-config: '[1]'\n", "must be a JSON object"),
     ("vllm:\n  speculative-config: '{}'\n  speculative_config: '{}'\n", "keep one")],
)
def test_bad_inference_config(text, match):
    with pytest.raises(SpecDecodeConfigError, match=match):
        parse_inference_config(text, "c")


def test_inference_config_file_missing_default_and_explicit(tmp_path):
    assert load_inference_config({"KAITO_INFERENCE_CONFIG": ""}).speculative_config is None
    with pytest.raises(SpecDecodeConfigError, match="does not exist"):
        load_inference_config({"KAITO_INFERENCE_CONFIG": str(tmp_path / "nope.yaml")})
    big = tmp_path / "big.yaml"
    big.write_text("#" * (2 * 1024 * 1024))
    with pytest.raises(SpecDecodeConfigError, match="cannot be read"):
        load_inference_config({"KAITO_INFERENCE_CONFIG": str(big)})


def test_parse_speculative_config_normalises_dashes():
    assert parse_speculative_config('{"prompt-lookup-max": 3}', "s") == {"prompt_lookup_max": 3}


def test_empty_env_value_means_not_set_and_the_file_decides(tmp_path):
    """Kubernetes sets a downward-API env var to "" when the annotation is absent."""
    path = tmp_path / "annotations"
    env = {"E": "", "KAITO_ANNOTATIONS_FILE": str(path)}
    path.write_text('kaito.sh/runtime="vllm"\n')
    annotation = read_annotation(env, ANNOTATION_KEY, "E")
    assert annotation.value is None and annotation.opt_in == "off"
    assert "annotations file" in annotation.source
    path.write_text(f'{ANNOTATION_KEY}="true"\n')
    assert read_annotation(env, ANNOTATION_KEY, "E").opt_in == "on"
    path.write_text(f'{ANNOTATION_KEY}=""\n')  # written empty in the file: a value, refused
    assert read_annotation(env, ANNOTATION_KEY, "E").opt_in == "invalid"
    assert read_annotation({**env, "E": "false"}, ANNOTATION_KEY, "E").opt_in == "off"

"""Parsers and readers: the downward-API annotations and inference_config.yaml."""

from __future__ import annotations

import json
import logging

import pytest
from support.bounded import run_bounded

from vllm_specdec_plugin.core.errors import SpecDecodeConfigError
from vllm_specdec_plugin.core.limits import MAX_ANNOTATIONS_BYTES
from vllm_specdec_plugin.core.settings import ANNOTATION_KEY, RUNTIME_KEY
from vllm_specdec_plugin.inputs import annotations
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


def oversized_default(tmp_path, monkeypatch, extra: int = 1):
    """The default annotations file opting in, `extra` bytes over the bound."""
    default = tmp_path / "annotations"
    head = f'{ANNOTATION_KEY}="true"\n{RUNTIME_KEY}="vllm"\n'
    default.write_text(head + "#" * (MAX_ANNOTATIONS_BYTES - len(head) + extra))
    monkeypatch.setattr(annotations, "DEFAULT_ANNOTATIONS_FILE", str(default))
    monkeypatch.setattr(annotations, "_said_oversized", set())
    return default


@pytest.mark.parametrize(("key", "env_name", "consequence"), [
    (ANNOTATION_KEY, "KAITO_ENABLE_SPECULATIVE_DECODING", "speculative decoding stays off"),
    (RUNTIME_KEY, "KAITO_RUNTIME", f"annotation {RUNTIME_KEY} reads as unset"),
])
def test_oversized_default_annotations_file_is_said_above_debug(tmp_path, monkeypatch,
                                                                plugin_log, key, env_name,
                                                                consequence):
    """Not "not opted in" silently (issue 29 item 8): one WARNING line per process naming the
    file, its size, the bound and what follows; the value still reads as unset."""
    default = oversized_default(tmp_path, monkeypatch)
    for _ in range(3):
        assert read_annotation({"KAITO_ANNOTATIONS_FILE": ""}, key, env_name).value is None
    said = [r.getMessage() for r in plugin_log.records if r.levelno > logging.DEBUG]
    assert said == [
        f"vllm-specdec-plugin: the downward-API annotations file {default} "
        f"({MAX_ANNOTATIONS_BYTES + 1} bytes) is not read: {consequence}; the file is larger "
        f"than {MAX_ANNOTATIONS_BYTES} bytes. Set {env_name} to give the annotation's value "
        "instead"]
    assert plugin_log.records[0].levelno == logging.WARNING


def test_annotations_file_at_the_bound_is_read_without_a_word(tmp_path, monkeypatch,
                                                              plugin_log):
    oversized_default(tmp_path, monkeypatch, extra=0)
    assert read_annotation({"KAITO_ANNOTATIONS_FILE": ""}, ANNOTATION_KEY, "E").opt_in == "on"
    assert not [r for r in plugin_log.records if r.levelno > logging.DEBUG]


def test_launcher_says_the_oversized_annotations_file_in_one_line(tmp_path, monkeypatch):
    """What a user sees: the launcher's dry run in a process of its own (no test logging),
    the default file pointed at an oversized one: the plan on stdout, one line on stderr."""
    default = oversized_default(tmp_path, monkeypatch)
    done = run_bounded(f"""
        import sys
        from vllm_specdec_plugin.inputs import annotations
        from vllm_specdec_plugin.launcher import main
        annotations.DEFAULT_ANNOTATIONS_FILE = {str(default)!r}
        sys.exit(main(["--dry-run", "--platform", "cpu", "--model", "m"],
                      {{"PATH": "", "KAITO_INFERENCE_CONFIG": ""}}))
    """, memory_mib=4096, timeout_s=120)
    assert done.returncode == 0, done
    assert json.loads(done.stdout)["decision"]["enabled"] is False
    said = [line for line in done.stderr.splitlines() if "vllm-specdec" in line]
    assert len(said) == 1 and str(default) in said[0] and "stays off" in said[0], done


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

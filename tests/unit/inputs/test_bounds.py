"""Hostile and broken files and flags: each class refused with one line, never a traceback.

The classes about memory or time (alias expansion) run in a child process under a memory and
time limit (`tests/support/bounded.py`); the others in-process, where any exception but
`SpecDecodeConfigError` fails the test.
"""

from __future__ import annotations

import json

import pytest
from support.bounded import run_bounded

from vllm_specdec_plugin.core.errors import SpecDecodeConfigError
from vllm_specdec_plugin.core.limits import MAX_DEPTH, MAX_INT_DIGITS, MAX_YAML_NODES
from vllm_specdec_plugin.core.settings import ANNOTATION_KEY
from vllm_specdec_plugin.inputs import parsers
from vllm_specdec_plugin.inputs.annotations import read_annotation, read_annotations_file
from vllm_specdec_plugin.inputs.checkpoint import inspect_checkpoint, inspect_draft
from vllm_specdec_plugin.inputs.engine_args import check_argv
from vllm_specdec_plugin.inputs.inference_config import (
    load_inference_config,
    parse_inference_config,
    parse_speculative_config,
)
from vllm_specdec_plugin.inputs.parsers import load_json, load_yaml
from vllm_specdec_plugin.inputs.presets import parse_preset_table


def billion_laughs() -> str:
    """Nine levels of nine aliases each: under 500 bytes that expand to 9^9 (387 million)
    strings (the issue's case was 479 bytes)."""
    names = "abcdefghi"
    lines = ["vllm:", '  a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for prev, name in zip(names, names[1:], strict=False):
        lines.append(f"  {name}: &{name} [" + ",".join([f"*{prev}"] * 9) + "]")
    lines.append("  speculative-config: '{\"method\":\"ngram\"}'")
    return "\n".join(lines) + "\n"


def test_billion_laughs_is_small():
    assert len(billion_laughs().encode()) < 500


def test_billion_laughs_refused_fast_within_memory(tmp_path):
    """Today's code ran out of memory after 47 s: refused in well under a second and 256 MiB."""
    config = tmp_path / "inference_config.yaml"
    config.write_text(billion_laughs())
    done = run_bounded(f"""
        import time
        from vllm_specdec_plugin.core.errors import SpecDecodeConfigError
        from vllm_specdec_plugin.inputs.inference_config import load_inference_config
        start = time.monotonic()
        try:
            load_inference_config({{"KAITO_INFERENCE_CONFIG": {str(config)!r}}})
        except SpecDecodeConfigError as exc:
            print("REFUSED", round(time.monotonic() - start, 3), exc.message)
    """, memory_mib=256, timeout_s=20)
    assert done.returncode == 0 and "REFUSED" in done.stdout, done
    assert f"more than {MAX_YAML_NODES} nodes" in done.stdout
    assert float(done.stdout.split()[1]) < 2.0


def test_billion_laughs_launcher_dry_run_without_opt_in(tmp_path):
    """The launcher reads the config even without the opt-in: exit 2, one line, bounded."""
    config = tmp_path / "inference_config.yaml"
    config.write_text(billion_laughs())
    done = run_bounded(f"""
        import sys
        from vllm_specdec_plugin.launcher import main
        sys.exit(main(["--dry-run", "--platform", "cpu", "--model", "m", "--root",
                       {str(tmp_path)!r}, "--config", {str(config)!r}],
                      {{"PATH": "", "KAITO_ANNOTATIONS_FILE": ""}}))
    """, memory_mib=512, timeout_s=60)
    assert done.returncode == 2, done
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "is refused" in lines[0] and str(config) in lines[0], done
    assert "Traceback" not in done.stderr


def nested_yaml(depth: int) -> str:
    return "vllm:\n  x: " + "[" * depth + "]" * depth + "\n"


def nested_json(depth: int) -> str:
    return '{"method": "ngram", "x": ' + "[" * depth + "]" * depth + "}"


@pytest.mark.parametrize("loader", ["libyaml", "python"])
@pytest.mark.parametrize("depth", [MAX_DEPTH + 1, 5000])
def test_deep_yaml_refused(monkeypatch, depth, loader):
    """libyaml's parser has a nesting limit of its own (1000); the composer counts to 64."""
    if loader == "python":
        monkeypatch.setattr(parsers, "BoundedLoader", parsers.PyBoundedLoader)
    with pytest.raises(SpecDecodeConfigError, match=f"c.yaml:2 (is refused: it nests deeper "
                                                    f"than {MAX_DEPTH} levels|is not valid "
                                                    "YAML .exceeded maximum nesting depth)"):
        parse_inference_config(nested_yaml(depth), "c.yaml")


def test_yaml_at_the_depth_limit_is_read():
    config = parse_inference_config(nested_yaml(MAX_DEPTH - 3), "c.yaml")
    assert "x" in config.vllm


@pytest.mark.parametrize("depth", [MAX_DEPTH + 1, 30_000])
def test_deep_json_refused_in_flag_config_and_checkpoint(tmp_path, depth):
    text = nested_json(depth)
    with pytest.raises(SpecDecodeConfigError, match=r"--speculative-config is refused: it nests"):
        parse_speculative_config(text, "--speculative-config")
    yaml_text = "vllm:\n  speculative-config: '" + text + "'\n"
    with pytest.raises(SpecDecodeConfigError, match=r"vllm.speculative-config in c.yaml is "
                                                    r"refused: it nests"):
        parse_inference_config(yaml_text, "c.yaml")
    (tmp_path / "config.json").write_text('{"architectures": ["X"], "x": '
                                          + "[" * depth + "]" * depth + "}")
    with pytest.raises(SpecDecodeConfigError, match=r"config.json is refused: it nests"):
        inspect_checkpoint(str(tmp_path))


def test_deep_json_in_vllm_flags_refused_before_vllms_parser():
    with pytest.raises(SpecDecodeConfigError,
                       match=r"vLLM argument 2 .* is refused: its JSON nests 30001"):
        check_argv(["--kv-transfer-config", "[" * 30_001 + "]" * 30_001])
    with pytest.raises(SpecDecodeConfigError, match="its JSON nests"):
        check_argv(["--speculative-config=" + "{\"a\":" * 100 + "1" + "}" * 100])
    check_argv(["--speculative-config", '{"method": "ngram", "x": [[1]]}', "--port", "1"])


@pytest.mark.parametrize("digits", [MAX_INT_DIGITS + 1, 5001])
def test_huge_integers_refused(digits):
    number = "9" * digits
    with pytest.raises(SpecDecodeConfigError, match=f"more than {MAX_INT_DIGITS} digits"):
        parse_speculative_config('{"method": "ngram", "num_speculative_tokens": ' + number + "}",
                                 "s")
    with pytest.raises(SpecDecodeConfigError, match=f"more than {MAX_INT_DIGITS} digits"):
        parse_inference_config(f"vllm:\n  max-model-len: {number}\n", "c")
    with pytest.raises(SpecDecodeConfigError, match=f"more than {MAX_INT_DIGITS} digits"):
        parse_speculative_config({"method": "ngram", "num_speculative_tokens": int(number[:4000])},
                                 "s")


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity", "1e999"])
def test_nan_and_infinity_refused_in_json(constant):
    with pytest.raises(SpecDecodeConfigError, match="refused"):
        parse_speculative_config('{"method": "ngram", "prompt_lookup_max": ' + constant + "}",
                                 "--speculative-config")


@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_nan_in_a_mapping_from_vllms_parser_refused(value):
    """vLLM's own `json.loads` accepts NaN; the mapping it hands over is checked too."""
    with pytest.raises(SpecDecodeConfigError, match="not a finite number"):
        parse_speculative_config({"method": "ngram", "prompt_lookup_max": value}, "s")


@pytest.mark.parametrize("scalar", [".nan", ".inf", "-.inf", "1.0e+999"])
def test_nan_and_infinity_refused_in_yaml(scalar):
    with pytest.raises(SpecDecodeConfigError, match="not a finite number"):
        parse_inference_config(f"vllm:\n  speculative-config:\n    x: {scalar}\n", "c")


def test_recursive_alias_refused():
    with pytest.raises(SpecDecodeConfigError, match="recursive alias"):
        load_yaml("a: &a [1, *a]\n", "f", "fix it")


@pytest.mark.parametrize(("text", "match"), [
    ("vllm:\n  x: !!binary aGVsbG8=\n", "bytes"),
    ("vllm:\n  x: !!set {a: null}\n", "set"),
])
def test_yaml_values_json_cannot_carry_refused(text, match):
    with pytest.raises(SpecDecodeConfigError, match=match):
        parse_inference_config(text, "c")


def test_yaml_timestamps_stay_text():
    """A bad date (2001-02-30) was a ValueError traceback; a timestamp is now its text."""
    config = parse_inference_config("vllm:\n  a: 2001-02-30\n  b: 2024-01-01\n", "c")
    assert dict(config.vllm) == {"a": "2001-02-30", "b": "2024-01-01"}


def test_presets_file_bounded():
    with pytest.raises(SpecDecodeConfigError, match="presets file p:"):
        parse_preset_table(billion_laughs().replace("vllm:", "presets:"), "p")
    with pytest.raises(SpecDecodeConfigError, match="nests deeper"):
        parse_preset_table("presets: " + "[" * 500 + "]" * 500, "p")


def test_non_utf8_config_refused_with_offset(tmp_path):
    config = tmp_path / "c.yaml"
    config.write_bytes(b"vllm:\n  served-model-name: caf\xff\n")
    with pytest.raises(SpecDecodeConfigError, match=r"not UTF-8 text \(byte 0xff at offset 30\)"):
        load_inference_config({"KAITO_INFERENCE_CONFIG": str(config)})


def test_annotations_file_non_utf8_only_matters_on_our_lines(tmp_path):
    path = tmp_path / "annotations"
    path.write_bytes(b'other="caf\xff"\n' + ANNOTATION_KEY.encode() + b'="true"\n')
    env = {"KAITO_ANNOTATIONS_FILE": str(path)}
    assert read_annotations_file(env)[0] == {ANNOTATION_KEY: "true"}
    path.write_bytes(ANNOTATION_KEY.encode() + b'="tr\xffue"\n')
    with pytest.raises(SpecDecodeConfigError, match=r":1 is not UTF-8 text \(byte 0xff"):
        read_annotation(env, ANNOTATION_KEY, "E")


def test_checkpoint_fields_of_the_wrong_type(tmp_path):
    def config(**fields):
        (tmp_path / "config.json").write_text(json.dumps(fields))
        return str(tmp_path)

    with pytest.raises(SpecDecodeConfigError, match="architectures must be a list of strings, "
                                                    "got int '5'; fix the checkpoint"):
        inspect_checkpoint(config(architectures=5))
    with pytest.raises(SpecDecodeConfigError, match="num_nextn_predict_layers must be a "
                                                    "non-negative integer, got str"):
        inspect_checkpoint(config(architectures=["X"], num_nextn_predict_layers="1"))
    with pytest.raises(SpecDecodeConfigError, match="medusa_num_heads must be"):
        inspect_checkpoint(config(architectures=["MedusaModel"], medusa_num_heads="4"))
    # fields that only guard a comparison, or mean nothing for this checkpoint: ignored
    info = inspect_checkpoint(config(architectures=["LlamaForCausalLM"], num_heads="4",
                                     hidden_size="big", vocab_size=[1]))
    assert info.num_heads is None and info.hidden_size is None and info.vocab_size is None
    with pytest.raises(SpecDecodeConfigError, match="speculators_config must be a mapping"):
        inspect_checkpoint(config(speculators_config=[1]))


def test_checkpoint_config_not_utf8_or_too_big(tmp_path):
    (tmp_path / "config.json").write_bytes(b'{"architectures": ["\xff"]}')
    with pytest.raises(SpecDecodeConfigError, match="not UTF-8 text"):
        inspect_checkpoint(str(tmp_path))
    (tmp_path / "config.json").write_text(" " * (5 << 20) + "{}")
    with pytest.raises(SpecDecodeConfigError, match="larger than"):
        inspect_checkpoint(str(tmp_path))


@pytest.mark.parametrize(("model", "match"), [
    ("x" * 300, "has a part of 300 characters"),
    ("org/" + "y" * 300, "has a part of 300 characters"),
    ("/" + "z/" * 2100, "longer than 4096 characters"),
    ("~nosuchuser-specdec/model", "knows no home directory for that user"),
    ("/models/a\x00b", "NUL character"),
])
def test_impossible_model_paths_refused(model, match):
    with pytest.raises(SpecDecodeConfigError, match=match):
        inspect_checkpoint(model)


def test_impossible_draft_paths_refused(tmp_path):
    with pytest.raises(SpecDecodeConfigError, match="VLLM_SPECDEC_DRAFT_MODEL .*part of 300"):
        inspect_draft(f"{tmp_path}/{'d' * 300}", None)


def test_hub_ids_and_missing_paths_are_not_local():
    assert inspect_checkpoint("Qwen/Qwen3.5-4B") is None
    assert inspect_checkpoint("/no/such/dir") is None


def test_json_errors_keep_their_message():
    with pytest.raises(SpecDecodeConfigError, match=r"is not valid JSON \(Expecting"):
        load_json("{method: ngram", "s", "fix")


def test_hostile_vllm_config_file_refused_before_vllms_yaml_load(tmp_path):
    """vLLM's own `--config FILE` is YAML that vLLM's parser loads with `yaml.safe_load`."""
    evil = tmp_path / "vllm.yaml"
    evil.write_text(billion_laughs().replace("vllm:\n", "x:\n"))
    for argv in (["--config", str(evil)], [f"--config={evil}"]):
        with pytest.raises(SpecDecodeConfigError, match=r"vLLM --config .*:\d+ is refused"):
            check_argv(argv)
    fine = tmp_path / "ok.yaml"
    fine.write_text("max-model-len: 64\n")
    check_argv(["--config", str(fine), "--config", str(tmp_path / "missing.yaml")])

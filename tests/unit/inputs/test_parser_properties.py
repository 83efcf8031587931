"""Property-based tests (hypothesis) over every parser of outside input.

Random text and bytes, and valid documents mutated with hostile fragments (alias bombs, deep
nesting, huge numbers, NaN, control characters, bytes that are not UTF-8, truncation), never
make a parser raise anything but the project's error, and each example stays within a time
bound (hypothesis' deadline) and a memory bound (tracemalloc's peak).
"""

from __future__ import annotations

import json
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.examples import examples

from vllm_specdec_plugin.cli.scrape import metrics_url
from vllm_specdec_plugin.cli.status_figures import status_of
from vllm_specdec_plugin.cli.status_render import render_text
from vllm_specdec_plugin.core.errors import SpecDecodeConfigError
from vllm_specdec_plugin.core.settings import ANNOTATION_KEY, RUNTIME_KEY
from vllm_specdec_plugin.inputs.annotations import parse_annotations
from vllm_specdec_plugin.inputs.checkpoint import inspect_checkpoint
from vllm_specdec_plugin.inputs.engine_args import check_argv
from vllm_specdec_plugin.inputs.inference_config import (
    parse_inference_config,
    parse_speculative_config,
)
from vllm_specdec_plugin.inputs.parsers import load_json
from vllm_specdec_plugin.inputs.presets import parse_preset_table
from vllm_specdec_plugin.inputs.vllm_metrics import parse_metrics, read_counters
from vllm_specdec_plugin.platforms.memory import available_memory

MEMORY_BOUND = 64 << 20
"""Peak bytes one example may allocate (the inputs are at most a few KiB)."""
TIME_BOUND_MS = 3000
PROPERTY = settings(max_examples=examples(150), deadline=TIME_BOUND_MS,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.function_scoped_fixture])

HOSTILE = [
    "&a [*a]", "*nope", "&x [1,2,3,4,5,6,7,8,9]\n", "[*x,*x,*x,*x,*x,*x,*x,*x,*x]",
    "[" * 300, "]" * 300, "{" * 300, '{"a":' * 100, "9" * 5001, "-" + "1" * 40, "1e999",
    ".nan", ".inf", "NaN", "Infinity", "-Infinity", "!!binary aGk=", "!!set {a: null}",
    "!!python/object:os.system {}", "2001-02-30", "\x1b[31m", "\x00", "\u202e", "\udcff",
    "\t", "\r", "\n", ": ", "- ", "'", '"', "\\", "\\x", "\\u12", "=", "#", "%YAML 1.1\n---\n",
    "<<: *x", "~nosuchuser/x", "/" + "d" * 300, "0x" + "f" * 40, "1:2:3:4:5:6:7:8",
]
SEEDS = {
    "config": ("vllm:\n  max-model-len: 2048\n  enforce-eager: true\n  speculative-config: "
               "'{\"method\":\"ngram\",\"num_speculative_tokens\":5,\"prompt_lookup_max\":4}'\n"),
    "presets": ("default_speculative_config: {method: mtp, num_speculative_tokens: 1}\n"
                "presets:\n  - name: a\n    aliases: [org/a]\n  - name: b\n"
                "    speculative_config: {method: ngram, num_speculative_tokens: 3}\n"),
    "json": '{"method": "ngram", "num_speculative_tokens": 5, "prompt_lookup_max": [4, 1.5]}',
    "annotations": (f'{ANNOTATION_KEY}="true"\n{RUNTIME_KEY}="vllm"\n'
                    'kubernetes.io/config.seen="2026-01-01T00:00:00Z"\n'),
    "checkpoint": json.dumps({"architectures": ["EagleLlamaForCausalLM"], "vocab_size": 32000,
                              "hidden_size": 4096, "num_nextn_predict_layers": 1,
                              "text_config": {"vocab_size": 1},
                              "speculators_config": {"proposal_methods": [
                                  {"speculative_tokens": 3}]}}),
    "metrics": ('vllm_specdec_decision_info{method="ngram",source="s"} 1\n'
                'vllm:spec_decode_num_drafts_total{engine="0"} 8.0\n'
                'vllm:spec_decode_num_draft_tokens_total{engine="0"} 40\n'
                'vllm:spec_decode_num_accepted_tokens_total{engine="0"} 24\n'
                'vllm:spec_decode_num_accepted_tokens_per_pos_total{position="0"} 7\n'),
    "cgroup": "0::/kubepods/pod1\n",
    "url": "http://user:pw@localhost:8000/metrics",
}


@st.composite
def mutated(draw: st.DrawFn, seed: str) -> str:
    """`seed` with a few random edits: hostile fragments inserted, slices cut or repeated."""
    text = seed
    for _ in range(draw(st.integers(0, 6))):
        at = draw(st.integers(0, len(text)))
        op = draw(st.sampled_from(["insert", "insert", "cut", "repeat", "random"]))
        if op == "insert":
            text = text[:at] + draw(st.sampled_from(HOSTILE)) + text[at:]
        elif op == "cut":
            text = text[:at] + text[at + draw(st.integers(0, 20)):]
        elif op == "repeat":
            piece = text[at:at + draw(st.integers(1, 40))]
            text = text[:at] + piece * draw(st.integers(1, 30)) + text[at:]
        else:
            text = text[:at] + draw(st.text(max_size=20)) + text[at:]
    return text


def inputs(seed: str) -> st.SearchStrategy[str]:
    return st.one_of(st.text(max_size=400), mutated(seed))


def within_bounds(parse: Callable[[], Any], allowed: tuple[type[BaseException], ...] = (
        SpecDecodeConfigError,)) -> None:
    """`parse()` returns or raises one of `allowed`, and allocates at most MEMORY_BOUND."""
    tracemalloc.start()
    try:
        parse()
    except allowed:
        pass
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    assert peak < MEMORY_BOUND, f"peak {peak >> 20} MiB"


@PROPERTY
@given(inputs(SEEDS["config"]))
def test_inference_config(text):
    def parse() -> None:
        config = parse_inference_config(text, "c.yaml")
        json.dumps(dict(config.vllm))  # what the launcher does with it: bounded too
    within_bounds(parse)


@PROPERTY
@given(inputs(SEEDS["presets"]))
def test_presets_file(text):
    within_bounds(lambda: parse_preset_table(text, "p.yaml"))


@PROPERTY
@given(inputs(SEEDS["json"]))
def test_speculative_config_json(text):
    def parse() -> None:
        json.dumps(parse_speculative_config(text, "--speculative-config"), allow_nan=False)
        load_json(text, "s", "fix")
        check_argv(["--speculative-config", text, f"--x={text}"])
    within_bounds(parse)


@PROPERTY
@given(inputs(SEEDS["annotations"]))
def test_annotations_file(text):
    within_bounds(lambda: parse_annotations(text, "f", (ANNOTATION_KEY, RUNTIME_KEY)))


def write(path: Path, text: str, raw: bytes) -> None:
    path.write_bytes(text.encode("utf-8", "surrogateescape") + raw)


@PROPERTY
@given(inputs(SEEDS["checkpoint"]), st.binary(max_size=8))
def test_checkpoint_config(tmp_path_factory, text, raw):
    directory = tmp_path_factory.mktemp("ckpt", numbered=True)
    write(directory / "config.json", text, raw)
    within_bounds(lambda: inspect_checkpoint(str(directory)))


@PROPERTY
@given(inputs(SEEDS["cgroup"]), st.binary(max_size=40), st.binary(max_size=40))
def test_host_files(tmp_path_factory, self_cgroup, limit, meminfo):
    root = tmp_path_factory.mktemp("root", numbered=True)
    (root / "proc/self").mkdir(parents=True)
    (root / "sys/fs/cgroup").mkdir(parents=True)
    (root / "sys/fs/cgroup/cgroup.controllers").write_text("memory\n")
    write(root / "proc/self/cgroup", self_cgroup, b"")
    (root / "sys/fs/cgroup/memory.max").write_bytes(limit)
    (root / "proc/meminfo").write_bytes(b"MemAvailable: " + meminfo)
    within_bounds(lambda: available_memory(root), allowed=())


@PROPERTY
@given(inputs(SEEDS["metrics"]))
def test_metrics_text(text):
    def parse() -> None:
        status = status_of(read_counters(parse_metrics(text)))
        render_text(status)
        json.loads(status.to_json())  # valid JSON: no NaN / Infinity
    within_bounds(parse, allowed=())


@PROPERTY
@given(inputs(SEEDS["url"]))
def test_status_url(text):
    within_bounds(lambda: metrics_url(text), allowed=(ValueError,))

"""`vllm-specdec whatif`: the command end to end on the tiny checkpoint (no engine), its three
outputs, and every bad input as one line on stderr with exit 2."""

from __future__ import annotations

import json

import pytest

from vllm_specdec_plugin.cli import main

COPYING = "def add(a, b):\n    return a + b\n\n"


def write_traffic(path, count: int = 12) -> None:
    lines = []
    for i in range(count):
        prompt = f"Repeat this {i}: " + COPYING * 3
        completion = COPYING * 2 if i % 2 else f"something new {i} " * 3
        lines.append(json.dumps({"prompt": prompt, "completion": completion}))
    lines.append("not json")
    lines.append(json.dumps({"messages": [{"role": "user", "content": "hi " + COPYING}],
                             "completion": COPYING}))
    path.write_text("\n".join(lines) + "\n")


@pytest.fixture
def traffic(tmp_path):
    path = tmp_path / "traffic.jsonl"
    write_traffic(path)
    return path


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(["whatif", *argv, "--no-progress"])
    out, err = capsys.readouterr()
    return code, out, err


def test_table_names_every_method_the_skipped_line_and_a_recommendation(tiny_llama, traffic,
                                                                         capsys):
    code, out, err = run(capsys, "--model", str(tiny_llama), "--traffic", str(traffic))
    assert code == 0, err
    assert "13 requests" in out and "skipped 1 of 14 entries; first: line 13" in out
    for label in ("ngram k=5 n=4-4", "suffix k=24", "adaptive k=16"):
        assert label in out
    assert "prior: roofline cpu" in out and "100% of the batch sizes priced from a prior" in out
    assert "recommended:" in out


def test_json_holds_the_documented_fields_and_consistent_counts(tiny_llama, traffic, capsys):
    code, out, _ = run(capsys, "--model", str(tiny_llama), "--traffic", str(traffic), "--json",
                       "--method", "ngram", "--k", "3", "--k", "6", "--batches", "1,4,32")
    assert code == 0
    report = json.loads(out)
    assert [(m["method"], m["k"]) for m in report["methods"]] == [("ngram", 3), ("ngram", 6)]
    for method in report["methods"]:
        for key in ("requests", "output_tokens", "steps", "drafted_tokens", "accepted_tokens",
                    "accepted_by_position", "predicted"):
            assert key in method
        assert sum(method["accepted_by_position"]) == method["accepted_tokens"]
        assert len(method["accepted_by_position"]) == method["k"]
        assert method["accepted_tokens"] <= method["drafted_tokens"]
        assert [p["batch"] for p in method["predicted"]] == [1, 4, 32]
        assert all(p["low"] <= p["speedup"] <= p["high"] for p in method["predicted"])
        # the copying half of the traffic is drafted and accepted
        assert method["accepted_tokens"] > 0
    assert report["costs"]["prior_share"] == 1.0


def test_measured_costs_are_used_where_given(tiny_llama, traffic, tmp_path, capsys):
    costs = tmp_path / "costs.json"
    costs.write_text(json.dumps({"step_costs": {
        "format": "vllm-specdec-step-costs/v1", "fixed_tokens": 16.0,
        "buckets": {"1-1": {"rows": 1, "no_draft_s": 0.01, "switch_s": 0.0005,
                            "per_token_s": 0.0002}}}}))
    code, out, err = run(capsys, "--model", str(tiny_llama), "--traffic", str(traffic),
                         "--json", "--method", "ngram", "--costs", str(costs),
                         "--batches", "1,64")
    assert code == 0, err
    report = json.loads(out)
    assert report["costs"]["measured_buckets"] == ["1-1"]
    assert report["costs"]["prior_share"] == 0.5
    assert "measured" in report["costs"]["source"]


def test_plot_is_written(tiny_llama, traffic, tmp_path, capsys):
    plot = tmp_path / "whatif.png"
    code, _, err = run(capsys, "--model", str(tiny_llama), "--traffic", str(traffic),
                       "--method", "ngram", "--plot", str(plot))
    assert code == 0, err
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize(("argv", "expected"), [
    (["--traffic", "{missing}"], "does not exist"),
    (["--traffic", "{empty}"], "is empty"),
    (["--traffic", "{junk}"], "no usable request"),
    (["--method", "suffix", "--prompt-lookup-max", "4"], "apply to ngram only"),
    (["--prompt-lookup-min", "5", "--prompt-lookup-max", "3"], "is above"),
    (["--gpu", "h100-sxm", "--platform", "cpu"], "--gpu names a GPU row"),
    (["--platform", "cuda", "--gpu", "tpu-v9"], "not in the hardware table"),
    (["--platform", "rbln"], "no step-cost prior for RBLN"),
    (["--costs", "{bad_costs}"], "--costs"),
    (["--max-requests", "0"], "--max-requests 0"),
    (["--model", "{no_model}"], "--model"),
], ids=["missing", "empty", "junk", "lookup-not-ngram", "lookup-order", "gpu-on-cpu",
        "unknown-gpu", "rbln-no-costs", "bad-costs", "max-requests", "no-tokenizer"])
def test_bad_input_is_one_line_and_exit_2(tiny_llama, traffic, tmp_path, capsys, argv,
                                          expected):
    paths = {"missing": tmp_path / "nope.jsonl", "empty": tmp_path / "empty.jsonl",
             "bad_costs": tmp_path / "costs.json", "no_model": tmp_path,
             "junk": tmp_path / "junk.jsonl"}
    paths["empty"].write_text("\n\n")
    paths["junk"].write_text('{"prompt": 3}\n{"completion": "x"}\n')
    paths["bad_costs"].write_text('{"step_costs": {"rows>=1": {"no_draft_s": -1}}}')
    argv = [a.format(**paths) for a in argv]
    base = {"--model": str(tiny_llama), "--traffic": str(traffic)}
    for i in range(0, len(argv) - 1):
        base.pop(argv[i], None)
    full = [x for pair in base.items() for x in pair] + argv
    code, out, err = run(capsys, *full)
    assert code == 2, (out, err)
    assert out == ""
    assert expected in err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_progress_reaches_each_stages_total(tiny_llama, traffic):
    import io

    from vllm_specdec_plugin.cli.whatif import ProgressBar
    from vllm_specdec_plugin.whatif.run import WhatifOptions, run_whatif
    from vllm_specdec_plugin.whatif.types import MethodConfig

    seen: dict[str, tuple[int, int]] = {}
    stream = io.StringIO()
    bar = ProgressBar(stream)

    def progress(stage: str, done: int, total: int) -> None:
        seen[stage] = (done, total)
        bar(stage, done, total)

    run_whatif(WhatifOptions(str(tiny_llama), str(traffic),
                             (MethodConfig("ngram", 5), MethodConfig("suffix", 8))), progress)
    assert seen == {"tokenize": (13, 13), "ngram k=5": (13, 13), "suffix k=8": (13, 13)}
    assert "13/13" in stream.getvalue()


def test_a_schedule_is_suggested_only_for_methods_vllm_schedules(tiny_llama, traffic, capsys):
    code, out, _ = run(capsys, "--model", str(tiny_llama), "--traffic", str(traffic),
                       "--method", "ngram")
    assert code == 0 and "recommended: ngram" in out
    assert "num_speculative_tokens_per_batch_size [[1, " in out
    code, out, _ = run(capsys, "--model", str(tiny_llama), "--traffic", str(traffic),
                       "--method", "suffix")
    assert code == 0 and "recommended: suffix" in out
    assert "suffix: no per-batch schedule" in out
    assert "num_speculative_tokens_per_batch_size" not in out

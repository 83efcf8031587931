"""`vllm-specdec whatif`'s replay speed per drafter, and the time and peak memory of the worst
input its bounds let through.

    python -m benchmarks whatif_bounds [--parts speed,line,file] [--rounds 3]
        [--file-gib 4] [--line-mb 1.6] [--model PATH] [--out FILE]

- `speed`: the kept traffic of the four workloads (`benchmarks/results/whatif/
  traffic-ngram-*.jsonl`, vLLM's own logs), tokenized once, replayed by each drafter whatif
  runs (`whatif/drafter.py`: vLLM's V1 n-gram matcher, Model Runner V2's n-gram speculator,
  suffix decoding, the plugin's adaptive proposer), rounds interleaved drafter by drafter;
  output tokens replayed per second, the median over rounds with every round.
- `line`: one ShareGPT conversation line of `--line-mb` MB (alternating turns of 1,600
  characters of code-like text: each assistant turn is a request with its whole history).
- `file`: a JSONL file of `--file-gib` GiB (`MAX_TRAFFIC_BYTES`: 4 GiB) of `{"prompt",
  "completion"}` lines of about 16 KiB each, so that the read stops at the byte bound before the
  request bound, and tokenizing stops at `MAX_TRAFFIC_TOKENS`.

`line` and `file` run the `vllm-specdec whatif` command itself (ngram k=5, the cpu prior,
`--max-model-len` at `MAX_REQUEST_TOKENS`, 1 Mi, so that no request is skipped for SmolLM2's 8k
context: the bounds alone stop the work) in a child process: wall time, and peak RSS from the
kernel's rusage of that child (`os.wait4`). The
generated files go to a temporary directory, removed after. SmolLM2-135M's tokenizer. Run it
alone on the host.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.lib.engine_setup import model_path
from benchmarks.lib.results import command, vllm_version, write_json
from vllm_specdec_plugin.core.limits import MAX_REQUEST_TOKENS

KEPT = Path(__file__).resolve().parents[1] / "results" / "whatif"
WORKLOADS = ("input_grounded", "mt_bench", "multi_turn", "open_ended")
DRAFTERS = (("ngram", 5, "cpu"), ("ngram", 5, "cuda"), ("suffix", 24, "cpu"),
            ("adaptive", 5, "cpu"))
"""(method, k, platform): the platform picks the drafter (`host_drafter`): cuda's ngram is
Model Runner V2's."""
TURN = ("def add(a, b):\n    return a + b  # the quick brown fox jumps over the lazy dog\n" * 24)
LINE_BYTES = 16 * 1024


def replay_speed(model: str, rounds: int) -> list[dict[str, Any]]:
    """Tokens/s of each drafter on each workload's kept traffic, `rounds` interleaved rounds."""
    from vllm_specdec_plugin.inputs.traffic import read_traffic
    from vllm_specdec_plugin.whatif.drafter import host_drafter
    from vllm_specdec_plugin.whatif.replay import replay
    from vllm_specdec_plugin.whatif.tokens import load_tokenizer, tokenize_traffic
    from vllm_specdec_plugin.whatif.types import MethodConfig

    tokenizer = load_tokenizer(model)
    cells = []
    for workload in WORKLOADS:
        traffic = read_traffic(KEPT / f"traffic-ngram-{workload}.jsonl")
        requests = tokenize_traffic(tokenizer, traffic.records).requests
        seconds: dict[tuple[str, int, str], list[float]] = {d: [] for d in DRAFTERS}
        tokens = {}
        for _ in range(rounds):
            for method, k, platform in DRAFTERS:
                config = MethodConfig(method, k)
                result = replay(requests, config, max_model_len=8192,
                                drafter=host_drafter(method, platform))
                seconds[(method, k, platform)].append(result.seconds)
                tokens[(method, k, platform)] = (int(result.output_tokens.sum()),
                                                 result.drafter)
        for key, times in seconds.items():
            out, drafter = tokens[key]
            rates = [out / s for s in times]
            cells.append({"workload": workload, "requests": len(requests), "drafter": drafter,
                          "method": key[0], "k": key[1], "output_tokens": out,
                          "tokens_per_s": statistics.median(rates),
                          "rounds_tokens_per_s": [round(r) for r in rates]})
            print(f"{workload:<15}{drafter:<16}{statistics.median(rates):>14,.0f} tokens/s",
                  flush=True)
    return cells


def write_line(path: Path, megabytes: float) -> int:
    """One ShareGPT conversation of about `megabytes` MB on one line."""
    turns: list[dict[str, str]] = []
    size = 0
    while size < megabytes * 1e6:
        value = f"{len(turns)} {TURN}"[:1600]
        turns.append({"from": "human" if len(turns) % 2 == 0 else "gpt", "value": value})
        size += len(value) + 32
    if len(turns) % 2:
        turns.pop()
    text = json.dumps({"conversations": turns})
    path.write_text(text + "\n")
    return len(turns)


def write_file(path: Path, gib: float) -> int:
    """`gib` GiB of `{"prompt", "completion"}` lines of about LINE_BYTES each, text varied by a
    counter so that no two lines are equal."""
    target = int(gib * (1 << 30))
    half = (LINE_BYTES - 64) // 2
    body = (TURN * (half // len(TURN) + 1))[:half - 16]
    written = lines = 0
    with path.open("w") as out:
        while written < target:
            line = json.dumps({"prompt": f"{lines} {body}", "completion": f"{body} {lines}"})
            out.write(line + "\n")
            written += len(line) + 1
            lines += 1
    return lines


def run_whatif(model: str, traffic: Path) -> dict[str, Any]:
    """The `vllm-specdec whatif` command on `traffic` in a child: wall seconds, peak RSS, its
    exit code and what its --json said about the traffic."""
    code = ("import sys; from vllm_specdec_plugin.cli import main; "
            f"sys.exit(main(['whatif', '--model', {model!r}, '--traffic', {str(traffic)!r}, "
            "'--method', 'ngram', '--json', '--no-progress', '--max-model-len', "
            f"'{MAX_REQUEST_TOKENS}']))")
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        child = subprocess.Popen([sys.executable, "-c", code], stdout=out, stderr=err)
        _, status, usage = os.wait4(child.pid, 0)
        seconds = time.perf_counter() - start
        child.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        text, errors = out.read().decode(), err.read().decode()
    found: dict[str, Any] = {"seconds": round(seconds, 1), "exit": child.returncode,
                             "peak_rss_mib": round(usage.ru_maxrss / 1024)}
    try:
        report = json.loads(text)
    except ValueError:
        found["stderr_tail"] = errors[-2000:]
        return found
    found["traffic"] = {key: report["traffic"].get(key) for key in (
        "entries", "requests_read", "requests", "requests_skipped", "stop_reason",
        "truncated", "output_tokens")}
    found["replay_tokens_per_s"] = report["methods"][0]["replay_tokens_per_s"]
    return found


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks whatif_bounds",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--parts", default="speed,line,file")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--file-gib", type=float, default=4.0)
    parser.add_argument("--line-mb", type=float, default=1.6)
    parser.add_argument("--model")
    parser.add_argument("--out", default="benchmarks/results/whatif-bounds.json")
    args = parser.parse_args(argv)
    parts = set(args.parts.split(","))
    model = model_path(args.model)
    meta = {"kind": "whatif_bounds",
            "command": command("whatif_bounds", list(argv if argv is not None else sys.argv[1:])),
            "vllm": vllm_version(), "cpus": os.cpu_count(), "date": time.strftime("%Y-%m-%d")}
    result: dict[str, Any] = {"meta": meta}
    if "speed" in parts:
        result["replay_speed"] = replay_speed(model, args.rounds)
    cases = (("line", "turns", lambda path: write_line(path, args.line_mb)),
             ("file", "lines", lambda path: write_file(path, args.file_gib)))
    with tempfile.TemporaryDirectory(prefix="whatif-bounds-") as tmp:
        for name, unit, write in cases:
            if name not in parts:
                continue
            path = Path(tmp) / f"{name}.jsonl"
            count = write(path)
            result[name] = {"bytes": path.stat().st_size, unit: count, **run_whatif(model, path)}
            path.unlink()
            print(f"{name}: {result[name]}", flush=True)
    write_json(Path(args.out), result, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

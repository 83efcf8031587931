"""The worst case of each bounded input class: time and peak memory, each in a fresh process.

    python -m benchmarks hostile_inputs [--repo PATH] [--memory-mib 2048] [--only NAME ...]

Each case runs in a child process (the plugin imported from `--repo`, default this checkout)
under an address-space limit; the child times the parse itself, and the parent reads the
child's peak resident memory (`ru_maxrss`) from `wait4`. `base` is the same child with the
imports alone, so peak - base is what the input cost. The cases use entry points that exist
on older checkouts too, so `--repo` pointed at one shows what the bounds changed. Prints a
Markdown table (the one in docs/reliability.md).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from collections.abc import Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

SETUP = """
import json, resource, sys, time
from collections.abc import Sequence
from pathlib import Path
from vllm_specdec_plugin.core.errors import SpecDecodeConfigError
WORK = Path(sys.argv[1])
def report(outcome, start):
    print(json.dumps({"outcome": outcome, "seconds": round(time.monotonic() - start, 3)}))
def run(fn):
    start = time.monotonic()
    try:
        fn()
    except SpecDecodeConfigError as exc:
        return report("refused: " + exc.message[:110], start)
    except SystemExit as exc:
        return report(f"exit {exc.code}", start)
    except BaseException as exc:
        return report(f"CRASH {type(exc).__name__}: {str(exc)[:80]}", start)
    report("accepted", start)
"""

LAUGHS = ("vllm:\n  a: &a [" + ",".join(['"lol"'] * 9) + "]\n"
          + "".join(f"  {n}: &{n} [" + ",".join([f"*{p}"] * 9) + "]\n"
                    for p, n in zip("abcdefgh", "bcdefghi", strict=True)))

# name -> (what it is, files to write under WORK, the code to time)
CASES: dict[str, tuple[str, dict[str, str | bytes], str]] = {
    "yaml-alias-bomb": (
        f"inference config: nested aliases, 9^9 strings ({len(LAUGHS)} bytes), launcher's path",
        {"c.yaml": LAUGHS},
        """
from vllm_specdec_plugin.inputs.inference_config import parse_inference_config
from vllm_specdec_plugin.launcher.plan import config_flags
run(lambda: config_flags(parse_inference_config((WORK / "c.yaml").read_text(), "c").vllm))
"""),
    "yaml-1mib-flat": (
        "inference config: 1 MiB, 99,000 scalars (just under the node bound), to flags",
        {"c.yaml": "vllm:\n  x: [" + ",".join(["abcdefghi"] * 99_000) + "]\n"},
        """
from vllm_specdec_plugin.inputs.inference_config import parse_inference_config
from vllm_specdec_plugin.launcher.plan import config_flags
run(lambda: config_flags(parse_inference_config((WORK / "c.yaml").read_text(), "c").vllm))
"""),
    "yaml-aliases-at-bound": (
        "inference config: aliases expanding to just under 4 Mi characters, to flags",
        {"c.yaml": "vllm:\n  a: &a '" + "x" * 40_000 + "'\n  b: [" + ",".join(["*a"] * 100)
         + "]\n"},
        """
from vllm_specdec_plugin.inputs.inference_config import parse_inference_config
from vllm_specdec_plugin.launcher.plan import config_flags
run(lambda: config_flags(parse_inference_config((WORK / "c.yaml").read_text(), "c").vllm))
"""),
    "yaml-deep": (
        "inference config: lists nested 5,000 deep",
        {"c.yaml": "vllm:\n  x: " + "[" * 5000 + "]" * 5000 + "\n"},
        """
from vllm_specdec_plugin.inputs.inference_config import parse_inference_config
run(lambda: parse_inference_config((WORK / "c.yaml").read_text(), "c"))
"""),
    "json-deep-flag": (
        "--speculative-config: 1 MiB of '[' (nesting 1,048,000 deep)",
        {"s.json": '{"method": "ngram", "x": ' + "[" * 524_000 + "]" * 524_000 + "}"},
        """
from vllm_specdec_plugin.inputs.inference_config import parse_speculative_config
run(lambda: parse_speculative_config((WORK / "s.json").read_text(), "--speculative-config"))
"""),
    "json-huge-int": (
        "--speculative-config: an integer of 5,001 digits",
        {"s.json": '{"method": "ngram", "num_speculative_tokens": ' + "9" * 5001 + "}"},
        """
from vllm_specdec_plugin.inputs.inference_config import parse_speculative_config
run(lambda: parse_speculative_config((WORK / "s.json").read_text(), "--speculative-config"))
"""),
    "json-nan": (
        "--speculative-config: NaN, printed back as JSON",
        {"s.json": '{"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_max": NaN}'},
        """
from vllm_specdec_plugin.inputs.inference_config import parse_speculative_config
run(lambda: json.dumps(parse_speculative_config((WORK / "s.json").read_text(), "s"),
                       allow_nan=False))
"""),
    "checkpoint-4mib": (
        "checkpoint config.json: 4 MiB (the size bound), 200,000 keys",
        {"ckpt/config.json": json.dumps({"architectures": ["LlamaForCausalLM"],
                                         **{f"k{i:06d}": i for i in range(200_000)}})},
        """
from vllm_specdec_plugin.inputs.checkpoint import inspect_checkpoint
run(lambda: inspect_checkpoint(str(WORK / "ckpt")))
"""),
    "checkpoint-deep": (
        "checkpoint config.json: nested 30,000 deep",
        {"deep/config.json": '{"x": ' + "[" * 30_000 + "]" * 30_000 + "}"},
        """
from vllm_specdec_plugin.inputs.checkpoint import inspect_checkpoint
run(lambda: inspect_checkpoint(str(WORK / "deep")))
"""),
    "annotations-256kib": (
        "annotations file: 256 KiB (the bound) of other annotations",
        {"annotations": 'kaito.sh/enable-speculative-decoding="true"\n'
         + ('x/y="' + "v" * 200 + '"\n') * 1200},
        """
from vllm_specdec_plugin.inputs.annotations import read_annotations_file
run(lambda: read_annotations_file({"KAITO_ANNOTATIONS_FILE": str(WORK / "annotations")}))
"""),
    "cgroup-garbage": (
        "cgroup memory.max: 64 KiB of digits, then '²'",
        {"root/sys/fs/cgroup/cgroup.controllers": "memory\n",
         "root/sys/fs/cgroup/memory.max": "9" * 65_000,
         "root/proc/self/cgroup": "0::/\n",
         "root/proc/meminfo": "MemAvailable: ² kB\n"},
        """
from vllm_specdec_plugin.platforms.memory import available_memory
run(lambda: available_memory(WORK / "root"))
"""),
    "tool-endless": (
        "nvidia-smi printing forever (`yes`)",
        {"bin/nvidia-smi": "#!/bin/sh\nexec yes 'GPU 0: NVIDIA H100 (UUID: GPU-a)'\n"},
        """
import os
os.chmod(WORK / "bin/nvidia-smi", 0o755)
from vllm_specdec_plugin.platforms import detect_host
run(lambda: detect_host(WORK, {"PATH": str(WORK / "bin")}, str(WORK / "bin")))
"""),
    "status-endless-body": (
        "status: a server sending an endless body",
        {},
        """
import socket, threading
sock = socket.socket(); sock.bind(("127.0.0.1", 0)); sock.listen(1)
def serve():
    conn, _ = sock.accept(); conn.recv(65536); conn.sendall(b"HTTP/1.0 200 OK\\r\\n\\r\\n")
    try:
        while True: conn.sendall(b"vllm:x 1\\n" * 8192)
    except OSError: pass
threading.Thread(target=serve, daemon=True).start()
from vllm_specdec_plugin import cli
def scrape():
    code = cli.main(["status", "--url", "127.0.0.1:%d" % sock.getsockname()[1]])
    raise SystemExit(code)
run(scrape)
"""),
    "status-16mib-metrics": (
        "status: 16 MiB of valid samples (just under the response cap)",
        {},
        """
import socket, threading
line = b'vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 8.0\\n'
body = line * ((16 << 20) // len(line) - 1)
sock = socket.socket(); sock.bind(("127.0.0.1", 0)); sock.listen(1)
def serve():
    conn, _ = sock.accept(); conn.recv(65536)
    conn.sendall(b"HTTP/1.0 200 OK\\r\\nContent-Length: %d\\r\\n\\r\\n" % len(body) + body)
threading.Thread(target=serve, daemon=True).start()
from vllm_specdec_plugin import cli
def scrape():
    import contextlib, io
    with contextlib.redirect_stdout(io.StringIO()):
        code = cli.main(["status", "--url", "127.0.0.1:%d" % sock.getsockname()[1], "--json"])
    raise SystemExit(code)
run(scrape)
"""),
    "status-trickle": (
        "status: a server sending one byte every 2 s",
        {},
        """
import socket, threading, time as t
sock = socket.socket(); sock.bind(("127.0.0.1", 0)); sock.listen(1)
def serve():
    conn, _ = sock.accept(); conn.recv(65536)
    try:
        conn.sendall(b"HTTP/1.1 200 OK\\r\\nContent-Length: 1000\\r\\n\\r\\n")
        for _ in range(1000): conn.sendall(b"v"); t.sleep(2)
    except OSError: pass
threading.Thread(target=serve, daemon=True).start()
from vllm_specdec_plugin import cli
def scrape():
    raise SystemExit(cli.main(["status", "--url", "127.0.0.1:%d" % sock.getsockname()[1]]))
run(scrape)
"""),
    "status-huge-position": (
        "status: one sample with position=\"100000000000\"",
        {},
        """
from vllm_specdec_plugin.cli.status_figures import status_of
from vllm_specdec_plugin.inputs.vllm_metrics import parse_metrics, read_counters
text = ('vllm:spec_decode_num_drafts_total 8\\n'
        'vllm:spec_decode_num_accepted_tokens_per_pos_total{position="100000000000"} 5\\n')
run(lambda: status_of(read_counters(parse_metrics(text))))
"""),
}


def run_case(repo: Path, name: str, memory_mib: int, timeout_s: float) -> dict[str, object]:
    what, files, code = CASES[name]
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for rel, content in files.items():
            path = work / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            if isinstance(content, bytes):
                path.write_bytes(content)
            else:
                path.write_text(content)
        base = _child(repo, SETUP + "\nimport vllm_specdec_plugin.cli, vllm_specdec_plugin."
                      "inputs.inference_config, vllm_specdec_plugin.launcher.plan\nprint('{}')",
                      work, memory_mib, timeout_s)
        done = _child(repo, SETUP + textwrap.dedent(code), work, memory_mib, timeout_s)
    return {"case": name, "what": what, **done, "base_mib": base["peak_mib"]}


def _child(repo: Path, code: str, work: Path, memory_mib: int,
           timeout_s: float) -> dict[str, object]:
    limit = memory_mib << 20

    def limits() -> None:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    env = {**os.environ, "PYTHONPATH": str(repo)}
    start = time.monotonic()
    with tempfile.TemporaryFile() as out:
        proc = subprocess.Popen([sys.executable, "-c", code, str(work)], stdout=out,
                                stderr=subprocess.DEVNULL, env=env, preexec_fn=limits,
                                cwd=repo)
        killed = threading.Event()

        def kill() -> None:
            killed.set()
            proc.kill()

        timer = threading.Timer(timeout_s, kill)
        timer.start()
        _, status, usage = os.wait4(proc.pid, 0)
        timer.cancel()
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        lines = [line for line in out.read().decode().splitlines() if line.startswith("{")]
    result = json.loads(lines[-1]) if lines else {}
    outcome = result.get("outcome") or (
        f"killed at the {timeout_s:g} s limit" if killed.is_set()
        else f"died (rc {proc.returncode}; out of memory at {memory_mib} MiB?)")
    return {"outcome": outcome, "seconds": result.get("seconds", round(
        time.monotonic() - start, 1)), "peak_mib": round(usage.ru_maxrss / 1024, 1)}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repo", type=Path, default=REPO,
                        help="the checkout whose plugin is measured (default: this one)")
    parser.add_argument("--memory-mib", type=int, default=2048,
                        help="address-space limit of each child")
    parser.add_argument("--timeout", type=float, default=120, help="seconds per case")
    parser.add_argument("--only", nargs="+", choices=CASES, help="run these cases only")
    parser.add_argument("--json", action="store_true", help="print JSON lines instead")
    args = parser.parse_args(argv)
    if not args.json:
        print("| case | input | outcome | time (s) | peak RSS (MiB) | of it imports |")
        print("|---|---|---|---|---|---|")
    for name in args.only or CASES:
        row = run_case(args.repo.resolve(), name, args.memory_mib, args.timeout)
        if args.json:
            print(json.dumps(row), flush=True)
        else:
            print(f"| {row['case']} | {row['what']} | {row['outcome']} | {row['seconds']} | "
                  f"{row['peak_mib']} | {row['base_mib']} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

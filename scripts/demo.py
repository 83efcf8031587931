"""The main job: serve SmolLM2-135M-Instruct with the opt-in set, ask for a code edit, and show
the plugin's decision, the answer and the speculative-decoding figures from /metrics.

Run through `bash scripts/demo.sh` (it sets the environment up first). `--model DIR` serves any
local checkpoint instead.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:  # run as a script: make `benchmarks` (the model builder) importable
    sys.path.insert(0, str(REPO))

CODE = '''def total_price(items):
    total = 0
    for item in items:
        total = total + item["price"] * item["quantity"]
    return total
'''
PROMPT = ("Rename the function total_price to order_total in this Python code and return the "
          f"whole code:\n\n{CODE}")
METRICS = ("vllm:spec_decode_num_drafts_total", "vllm:spec_decode_num_draft_tokens_total",
           "vllm:spec_decode_num_accepted_tokens_total")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def call(url: str, body: dict | None = None, timeout: float = 300) -> str:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data,
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return response.read().decode()


def wait_ready(proc: subprocess.Popen, base: str, timeout: float = 600) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            sys.exit(f"demo: the server exited with {proc.returncode}; see its log above")
        try:
            call(f"{base}/health", timeout=5)
            return
        except OSError:
            time.sleep(2)
    sys.exit("demo: the server did not become ready in time")


def counters(text: str) -> dict[str, float]:
    values = dict.fromkeys(METRICS, 0.0)
    for line in text.splitlines():
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name in values:
            values[name] += float(line.rsplit(" ", 1)[1])
    return values


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", help="a local checkpoint (default: SmolLM2-135M-Instruct)")
    args = parser.parse_args()
    if args.model:
        model = args.model
    else:
        from benchmarks.smollm2 import ensure_smollm2

        model = str(ensure_smollm2())
    env = {**os.environ, "KAITO_ENABLE_SPECULATIVE_DECODING": "true", "HF_HUB_OFFLINE": "1"}
    print("== the plugin's decision (vllm-specdec explain)", flush=True)
    subprocess.run([sys.executable, "-m", "vllm_specdec_plugin.cli", "explain", "--model", model],
                   env=env, check=False)
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    print(f"== serving {model} on {base} (vllm-specdec-launch)", flush=True)
    proc = subprocess.Popen(
        [sys.executable, "-m", "vllm_specdec_plugin.launcher", "--model", model, "--",
         "--port", str(port), "--max-model-len", "2048", "--served-model-name", "smollm2",
         "--disable-uvicorn-access-log"], env=env, start_new_session=True)
    try:
        wait_ready(proc, base)
        started = time.monotonic()
        answer = json.loads(call(f"{base}/v1/chat/completions", {
            "model": "smollm2", "temperature": 0, "max_tokens": 160,
            "messages": [{"role": "user", "content": PROMPT}]}))
        seconds = time.monotonic() - started
        figures = counters(call(f"{base}/metrics"))
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
    drafts, draft_tokens, accepted = (figures[name] for name in METRICS)
    tokens = answer["usage"]["completion_tokens"]
    print("\n== the answer\n" + answer["choices"][0]["message"]["content"])
    print("\n== speculative decoding (from /metrics)")
    print(f"output tokens: {tokens} in {seconds:.2f}s ({tokens / seconds:.1f} tok/s)")
    print(f"drafts: {drafts:.0f}, draft tokens: {draft_tokens:.0f}, accepted: {accepted:.0f}")
    if draft_tokens:
        print(f"acceptance rate: {accepted / draft_tokens:.1%}")
        print(f"mean acceptance length: {1 + accepted / max(drafts, 1):.2f} tokens per step")
    return 0 if drafts > 0 else 1


if __name__ == "__main__":
    sys.exit(main())

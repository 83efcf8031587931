"""The demo: the same requests to SmolLM2-135M-Instruct without and with the opt-in, side by side.

Two `vllm-specdec-launch` servers in turn (the annotation "false", then "true"), same flags,
float32 so greedy answers are bit-identical with and without speculation. Each gets one warm-up
request, then the same editing/quoting requests one at a time (where speculation pays most); the
demo prints both output tokens/s, the ratio, the acceptance, one answer with its per-request
figures, and `vllm-specdec status`. vLLM's own log goes to a file.

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
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:  # run as a script: make `benchmarks` (the model builder) importable
    sys.path.insert(0, str(REPO))

NAME = "smollm2"
SERVE_FLAGS = ["--served-model-name", NAME, "--dtype", "float32", "--enforce-eager",
               "--max-model-len", "2048", "--disable-uvicorn-access-log"]
EMAIL = ("Hi team,\nThe quarterly review meeting is moved from Tuesday to Thursday at 3 pm in "
         "room 204. Please bring your project updates and the budget numbers for the next "
         "quarter. Lunch will be provided.\nThanks,\nMaria")
NOTES = ("Release notes, version 2.4:\n- The export button now saves files as CSV and JSON.\n"
         "- Search results load twice as fast.\n- Fixed a crash when the settings page was "
         "opened offline.\n- The dark theme is now the default for new users.")
DIRECTIONS = ("To reach the office, take the number 12 bus to Market Square. Walk north past the "
              "library, turn left at the bakery, and enter the glass building on the corner. "
              "Reception is on the second floor.")
# What a 135M model does well: quoting given text back (a reply that cites, a copy edit).
REQUESTS = [
    f"Repeat the following email exactly, word for word:\n\n{EMAIL}",
    f"Repeat the following release notes exactly:\n\n{NOTES}",
    f"Repeat these directions exactly:\n\n{DIRECTIONS}",
    f"Copy this email exactly:\n\n{EMAIL}",
]
MAX_TOKENS = 160
ROUNDS = 2  # every request twice: more tokens per measurement, same for both servers


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


def chat(base: str, prompt: str, max_tokens: int = MAX_TOKENS) -> dict:
    return json.loads(call(f"{base}/v1/chat/completions", {
        "model": NAME, "temperature": 0, "max_tokens": max_tokens,
        "messages": [{"role": "user", "content": prompt}]}))


class Server:
    """`vllm-specdec-launch` in its own session; its output goes to `log`."""

    def __init__(self, model: str, opt_in: str, log: Path) -> None:
        self.port, self.log = free_port(), log
        self.base = f"http://127.0.0.1:{self.port}"
        env = {**os.environ, "KAITO_ENABLE_SPECULATIVE_DECODING": opt_in, "HF_HUB_OFFLINE": "1",
               "VLLM_NO_USAGE_STATS": "1"}
        with log.open("w") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "vllm_specdec_plugin.launcher", "--model", model, "--",
                 "--port", str(self.port), *SERVE_FLAGS],
                stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)

    def wait_ready(self, timeout: float = 600) -> float:
        started = time.monotonic()
        while time.monotonic() - started < timeout:
            if self.proc.poll() is not None:
                sys.exit(f"demo: the server exited with {self.proc.returncode}; its log: "
                         f"{self.log}")
            try:
                call(f"{self.base}/health", timeout=5)
                return time.monotonic() - started
            except OSError:
                time.sleep(1)
        sys.exit(f"demo: the server was not ready in {timeout:.0f} s; its log: {self.log}")

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)


def run(model: str, opt_in: str, log: Path, with_status: bool) -> dict:
    """Start a server, warm it up, send every request in turn; what it answered and how fast."""
    server = Server(model, opt_in, log)
    try:
        print(f"   starting vllm serve (log: {log}) ...", end=" ", flush=True)
        print(f"ready in {server.wait_ready():.0f} s", flush=True)
        chat(server.base, "Say hello.", max_tokens=8)  # warm-up, not timed
        answers, seconds = [], 0.0
        for prompt in REQUESTS * ROUNDS:
            started = time.monotonic()
            answers.append(chat(server.base, prompt))
            seconds += time.monotonic() - started
        status = status_text(server.base) if with_status else ""
    finally:
        server.stop()
    tokens = sum(a["usage"]["completion_tokens"] for a in answers)
    print(f"   {len(answers)} requests, {tokens} output tokens in {seconds:.1f} s: "
          f"{tokens / seconds:.1f} tok/s", flush=True)
    return {"answers": answers, "tokens": tokens, "seconds": seconds, "status": status}


def status_text(base: str) -> str:
    done = subprocess.run([sys.executable, "-m", "vllm_specdec_plugin.cli", "status", "--url",
                           base], capture_output=True, text=True, check=False)
    return (done.stdout + done.stderr).rstrip()


def text_of(answer: dict) -> str:
    return answer["choices"][0]["message"]["content"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", help="a local checkpoint (default: SmolLM2-135M-Instruct)")
    parser.add_argument("--log-dir", type=Path, help="where vLLM's logs go (default: a temp dir)")
    args = parser.parse_args()
    if args.model:
        model = args.model
    else:
        from benchmarks.smollm2 import ensure_smollm2

        model = str(ensure_smollm2())
    logs = args.log_dir or Path(tempfile.mkdtemp(prefix="vllm-specdec-demo-"))
    logs.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    print(f"== {Path(model).name}, float32, {os.cpu_count()} CPU cores: {len(REQUESTS)} "
          f"quoting requests x {ROUNDS}, greedy, one at a time, max {MAX_TOKENS} tokens each")
    print('== 1/2 without speculation: kaito.sh/enable-speculative-decoding="false"')
    base = run(model, "false", logs / "without.log", with_status=False)
    print('== 2/2 with the opt-in: kaito.sh/enable-speculative-decoding="true"')
    spec = run(model, "true", logs / "with.log", with_status=True)

    base_rate, spec_rate = (r["tokens"] / r["seconds"] for r in (base, spec))
    same = [text_of(a) == text_of(b) for a, b in zip(base["answers"], spec["answers"],
                                                      strict=True)]
    figures = [(a.get("metrics") or {}).get("speculative_decoding") or {}
               for a in spec["answers"]]
    print("\n== result")
    print(f"   without speculation: {base_rate:6.1f} tok/s")
    print(f"   with the opt-in:     {spec_rate:6.1f} tok/s   ({spec_rate / base_rate:.2f}x)")
    print(f"   identical answers:   {sum(same)} of {len(same)}")
    print("   acceptance per request (metrics.speculative_decoding.draft_acceptance_rate): "
          + ", ".join(f"{f.get('draft_acceptance_rate', 0):.2f}" for f in figures))
    print(f"\n== request 1 and its answer (with speculation)\n{REQUESTS[0]}\n---\n"
          f"{text_of(spec['answers'][0])}")
    print("\n== its metrics.speculative_decoding (per_request_spec_decode_metrics=summary)")
    print(json.dumps(figures[0], indent=2))
    print(f"\n== vllm-specdec status --url <server>\n{spec['status']}")
    print(f"\n== done in {time.monotonic() - started:.0f} s; vLLM logs in {logs}")
    return 0 if spec["status"] and base_rate > 0 else 1


if __name__ == "__main__":
    sys.exit(main())

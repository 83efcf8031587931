#!/usr/bin/env bash
# The main job on a fresh machine: set up, then serve SmolLM2-135M without and with the opt-in and
# show what speculative decoding buys (vLLM's own log goes to a file; see scripts/demo.py).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-env.sh
. .venv/bin/activate
exec python scripts/demo.py "$@"

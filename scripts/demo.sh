#!/usr/bin/env bash
# The main job on a fresh machine: set up, then serve SmolLM2-135M with speculative decoding on.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-env.sh
. .venv/bin/activate
exec python scripts/demo.py "$@"

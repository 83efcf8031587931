#!/usr/bin/env bash
# The test command: set up the environment if needed, lint, run every test.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-env.sh
# promtool for the alert unit tests (tests/deploy/): Debian's prometheus
bash .ci/setup-tools.sh
# vllm-rbln 0.12 + vLLM 0.30 (tests/compat/test_rbln.py runs the RBLN rules against their code)
bash .ci/setup-rbln-env.sh
# vLLM 0.33.0, the GPU hosts' vLLM (tests/compat/test_vllm033.py runs its config layer on its own
# CudaPlatform with the driver stood in)
bash .ci/setup-vllm033-env.sh
. .venv/bin/activate
ruff check vllm_specdec_plugin tests benchmarks
# The type checker (strict on the pure core; pyproject.toml [tool.mypy]).
mypy
python -m pytest -ra --durations=15 "$@"

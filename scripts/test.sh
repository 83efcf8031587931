#!/usr/bin/env bash
# The test command: set up the environments if needed, lint, type-check, run the tests.
#
#   bash scripts/test.sh           every test, every tier (what CI runs; docs/testing.md)
#   bash scripts/test.sh --fast    the unit and contract tiers: no vLLM engine starts
#
# Further arguments go to pytest (`bash scripts/test.sh --fast -k status`). Two pytest workers
# (pytest-xdist), one per core, each taking whole test files (`--dist loadfile`), so a file's
# module-scoped engine is started once; PYTEST_WORKERS=1 runs everything in one process.
set -euo pipefail
cd "$(dirname "$0")/.."
tier=full
if [[ "${1:-}" == "--fast" ]]; then
  tier=fast
  shift
fi
start=$(date +%s)
# The three environments are built side by side: installing is mostly unpacking wheels from the
# pip cache and byte-compiling them, one process each (one at a time, 450 s on 2 cores). Not
# `--no-compile`: where PYTHONDONTWRITEBYTECODE is set (this host), every engine process would
# then compile torch and vLLM anew (the suite took 2254 s instead of 1503 s).
logs=$(mktemp -d)
# vllm-rbln 0.12 + vLLM 0.30 (tests/compat/test_rbln.py runs the RBLN rules against their code)
bash .ci/setup-rbln-env.sh >"$logs/rbln" 2>&1 & rbln=$!
# vLLM 0.33.0, the GPU hosts' vLLM (tests/compat/test_vllm033.py runs its config layer on its own
# CudaPlatform with the driver stood in)
bash .ci/setup-vllm033-env.sh >"$logs/vllm033" 2>&1 & vllm033=$!
bash scripts/setup-env.sh
# promtool for the alert unit tests (tests/deploy/): Debian's prometheus
bash .ci/setup-tools.sh
failed=0
wait "$rbln" || failed=1
cat "$logs/rbln"
wait "$vllm033" || failed=1
cat "$logs/vllm033"
rm -rf "$logs"
if [[ $failed != 0 ]]; then
  echo "test.sh: an environment failed to build (its output is above)" >&2
  exit 1
fi
. .venv/bin/activate
ruff check vllm_specdec_plugin tests benchmarks
# The type checker (strict on the pure core; pyproject.toml [tool.mypy]).
mypy
echo "test.sh: environments, lint and types in $(( $(date +%s) - start ))s"
workers=${PYTEST_WORKERS:-2}
parallel=()
if [[ "$workers" != 1 ]]; then
  parallel=(-n "$workers" --dist loadfile)
fi
marks=()
if [[ $tier == fast ]]; then
  # The unit tier (tests/unit, tests/deploy) and the contract tests (vLLM's own code, no model).
  marks=(-m "not engine or contract")
fi
python -m pytest -ra --durations=15 "${parallel[@]}" "${marks[@]}" "$@"
echo "test.sh: $tier tier done in $(( $(date +%s) - start ))s"

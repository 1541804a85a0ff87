# shellcheck shell=bash
# Sourced by scripts/run.sh and scripts/test.sh (from the repository root): makes sure .venv
# exists and has the requirements installed.
#
#     source scripts/_venv.sh runtime   # requirements/runtime.txt: what the example system runs
#     source scripts/_venv.sh all       # requirements.txt: runtime and test tools
#
# Reinstalls only when the files (or the Python it runs on) changed since the last install,
# recorded in .venv/.requirements-runtime.sha256 and .venv/.requirements.sha256. A .venv with
# everything installed serves run.sh as it is; a runtime-only one gets the test tools added when
# the tests run.

VENV=.venv
_SET=${1:?scripts/_venv.sh needs runtime or all}
STAMP_ALL="$VENV/.requirements.sha256"
STAMP_RUNTIME="$VENV/.requirements-runtime.sha256"

_find_python() {
    local candidate
    for candidate in python3.11 python3 python; do
        if command -v "$candidate" >/dev/null 2>&1 \
            && "$candidate" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
            echo "$candidate"
            return 0
        fi
    done
    echo "error: Python 3.11 or newer is needed (tried python3.11, python3, python)" >&2
    return 1
}

_create_venv() {
    local python
    python=$(_find_python) || return 1
    echo "Creating $VENV with $python ..."
    if "$python" -m venv "$VENV"; then
        return 0
    fi
    # A fresh Debian/Ubuntu ships Python without ensurepip; the venv module lives in python3-venv.
    rm -rf "$VENV"
    if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
        echo "python -m venv failed: installing python3-venv ..."
        apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y python3-venv
        "$python" -m venv "$VENV"
    else
        echo "error: '$python -m venv' failed; install python3-venv (apt-get install python3-venv)" >&2
        return 1
    fi
}

_hash() {
    { cat "$@"; "$VENV/bin/python" -VV; } | sha256sum | cut -d' ' -f1
}

case "$_SET" in
runtime | all) ;;
*)
    echo "error: scripts/_venv.sh takes 'runtime' or 'all', not '$_SET'" >&2
    return 2
    ;;
esac

if [ ! -x "$VENV/bin/python" ] || ! "$VENV/bin/python" -c 'import sys' >/dev/null 2>&1; then
    _create_venv
fi

_want_runtime=$(_hash requirements/runtime.txt)
_want_all=$(_hash requirements.txt requirements/runtime.txt requirements/test.txt)
if [ "$_SET" = all ]; then
    if [ "$(cat "$STAMP_ALL" 2>/dev/null)" != "$_want_all" ]; then
        echo "Installing requirements.txt (runtime and test tools) into $VENV ..."
        "$VENV/bin/python" -m pip install -r requirements.txt
        echo "$_want_all" > "$STAMP_ALL"
        echo "$_want_runtime" > "$STAMP_RUNTIME"
    fi
elif [ "$(cat "$STAMP_ALL" 2>/dev/null)" != "$_want_all" ] \
    && [ "$(cat "$STAMP_RUNTIME" 2>/dev/null)" != "$_want_runtime" ]; then
    echo "Installing requirements/runtime.txt into $VENV ..."
    "$VENV/bin/python" -m pip install -r requirements/runtime.txt
    echo "$_want_runtime" > "$STAMP_RUNTIME"
fi
unset _SET _want_runtime _want_all

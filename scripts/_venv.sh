# shellcheck shell=bash
# Sourced by scripts/run.sh and scripts/test.sh (from the repository root): makes sure .venv
# exists and has requirements.txt installed. Reinstalls only when requirements.txt (or the
# Python it runs on) changed since the last install, recorded in .venv/.requirements.sha256.

VENV=.venv
STAMP="$VENV/.requirements.sha256"

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

if [ ! -x "$VENV/bin/python" ] || ! "$VENV/bin/python" -c 'import sys' >/dev/null 2>&1; then
    _create_venv
fi

_wanted=$({ cat requirements.txt; "$VENV/bin/python" -VV; } | sha256sum | cut -d' ' -f1)
if [ "$(cat "$STAMP" 2>/dev/null)" != "$_wanted" ]; then
    echo "Installing requirements.txt into $VENV ..."
    "$VENV/bin/python" -m pip install -r requirements.txt
    echo "$_wanted" > "$STAMP"
fi
unset _wanted

#!/usr/bin/env bash
# Runs the tool dispatch benchmark in its own virtualenv, .venv-bench (git-ignored), which holds
# the project's requirements plus the peers of benchmarks/requirements.txt. Arguments go to
# benchmarks/dispatch.py, e.g. `bash benchmarks/run.sh --json bench.json --profile`.
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=.venv-bench
STAMP="$VENV/.requirements.sha256"

if [ ! -x "$VENV/bin/python" ]; then
    echo "Creating $VENV ..." >&2
    python3 -m venv "$VENV"
fi

# Reinstall only when a requirements file (or the venv's Python) changed since the last install.
wanted=$(cat requirements.txt benchmarks/requirements.txt <("$VENV/bin/python" -VV) | sha256sum)
if [ ! -f "$STAMP" ] || [ "$(cat "$STAMP")" != "$wanted" ]; then
    echo "Installing requirements.txt and benchmarks/requirements.txt into $VENV ..." >&2
    "$VENV/bin/python" -m pip install --quiet -r requirements.txt -r benchmarks/requirements.txt
    echo "$wanted" > "$STAMP"
fi

exec "$VENV/bin/python" benchmarks/dispatch.py "$@"

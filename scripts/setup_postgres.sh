#!/usr/bin/env bash
# Starts (or reuses) a throwaway local PostgreSQL server for the tests and benchmarks, and prints
# the DATABASE_URL to use as the last line of stdout (everything else goes to stderr):
#
#     url=$(bash scripts/setup_postgres.sh)        # start, or reuse the running server
#     bash scripts/setup_postgres.sh status        # exit 0 when running (prints the URL), 3 when not
#     bash scripts/setup_postgres.sh stop          # stop it (the data directory stays)
#     bash scripts/setup_postgres.sh destroy       # stop it and delete the data directory
#
# For tests only: trust authentication, listening on 127.0.0.1 only, fsync off. Nothing needs
# installing by hand: it uses the PostgreSQL binaries under /usr/lib/postgresql/<version>/bin (15
# preferred) or on PATH, and on a Debian/Ubuntu machine without them installs postgresql-15 (or
# the distribution's `postgresql`) with apt-get when run as root. initdb refuses to run as root,
# so as root the server runs as the `postgres` system user (created when missing).
#
# Environment:
#     TC_PG_PORT   port (default 54329)
#     TC_PG_DATA   data directory (default var/pg/<port>, or /tmp/tool_calling-pg-<port> when
#                  the postgres user cannot reach var/)
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
PORT=${TC_PG_PORT:-54329}
ACTION=${1:-start}
PG_USER=postgres # the database superuser initdb creates (-U), whoever runs the server

log() { echo "setup_postgres: $*" >&2; }
die() {
    echo "setup_postgres: error: $*" >&2
    exit 1
}

case "$PORT" in
'' | *[!0-9]*) die "TC_PG_PORT must be a port number, got '$PORT'" ;;
esac
case "$ACTION" in
start | status | stop | destroy | url) ;;
-h | --help | help)
    sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
    exit 0
    ;;
*) die "unknown action '$ACTION' (start, status, stop, destroy, url)" ;;
esac

URL="postgres://$PG_USER@127.0.0.1:$PORT/postgres"

# --- Binaries ---------------------------------------------------------------------------------

find_bindir() {
    local dir
    for dir in /usr/lib/postgresql/15/bin $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r); do
        if [ -x "$dir/initdb" ] && [ -x "$dir/pg_ctl" ]; then
            echo "$dir"
            return 0
        fi
    done
    if command -v pg_ctl >/dev/null 2>&1 && command -v initdb >/dev/null 2>&1; then
        dirname "$(readlink -f "$(command -v pg_ctl)")"
        return 0
    fi
    return 1
}

install_postgres() {
    if ! command -v apt-get >/dev/null 2>&1; then
        die "no PostgreSQL binaries (initdb, pg_ctl) found and apt-get is not available; install PostgreSQL 15 or point TC_PG_PORT at a running server"
    fi
    if [ "$(id -u)" != 0 ]; then
        die "no PostgreSQL binaries (initdb, pg_ctl) found; run as root to install them with apt-get, or 'apt-get install postgresql-15'"
    fi
    log "installing PostgreSQL with apt-get (apt-get update first) ..."
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >&2 || die "apt-get update failed"
    # postgresql-15 on Debian 12; other releases ship another major version as `postgresql`.
    # Debian's packages create a `main` cluster on port 5432; we never use it.
    if ! apt-get install -y -qq --no-install-recommends postgresql-15 >&2 9>&-; then
        log "postgresql-15 is not available here; installing the distribution's postgresql"
        apt-get install -y -qq --no-install-recommends postgresql >&2 9>&- ||
            die "apt-get install postgresql failed"
    fi
}

BINDIR=""
need_binaries() {
    if [ -z "$BINDIR" ]; then
        BINDIR=$(find_bindir) || {
            install_postgres
            BINDIR=$(find_bindir) || die "PostgreSQL was installed but initdb/pg_ctl were not found"
        }
    fi
}

# --- Who runs the server, and where its data lives ---------------------------------------------

AS_ROOT=0
[ "$(id -u)" = 0 ] && AS_ROOT=1

ensure_system_user() {
    if ! id -u postgres >/dev/null 2>&1; then
        log "creating the 'postgres' system user"
        if command -v useradd >/dev/null 2>&1; then
            useradd --system --user-group --home-dir /var/lib/postgresql --shell /bin/bash postgres
        else
            adduser --system --group --home /var/lib/postgresql --shell /bin/bash postgres >&2
        fi
    fi
}

# Runs a command as the server's owner: the postgres system user when we are root, else us.
as_owner() {
    if [ "$AS_ROOT" = 1 ]; then
        # From /, which postgres can always enter (the caller's directory may be /root/...).
        if command -v runuser >/dev/null 2>&1; then
            (cd / && runuser -u postgres -- "$@")
        else
            (cd / && su postgres -s /bin/sh -c "$(printf '%q ' "$@")")
        fi
    else
        "$@"
    fi
}

choose_data_dir() {
    if [ -n "${TC_PG_DATA:-}" ]; then
        DATA=$(realpath -m "$TC_PG_DATA")
        return
    fi
    DATA=$ROOT/var/pg/$PORT
    if [ "$AS_ROOT" = 1 ]; then
        # The repository may sit where the postgres user cannot go (/root/...): use /tmp then.
        # Decided from what exists, so `status` and `stop` find the directory `start` chose.
        local fallback=${TMPDIR:-/tmp}/tool_calling-pg-$PORT
        if [ -f "$fallback/PG_VERSION" ] && [ ! -f "$DATA/PG_VERSION" ]; then
            DATA=$fallback
        elif [ "$ACTION" = start ] && [ ! -f "$DATA/PG_VERSION" ]; then
            ensure_system_user
            mkdir -p "$ROOT/var/pg"
            if ! runuser -u postgres -- test -x "$ROOT/var/pg" 2>/dev/null; then
                DATA=$fallback
            fi
        fi
    fi
}

DATA=""
choose_data_dir

running() {
    [ -f "$DATA/PG_VERSION" ] || return 1
    need_binaries
    as_owner "$BINDIR/pg_ctl" -D "$DATA" status >/dev/null 2>&1
}

accepting() {
    if [ -x "$BINDIR/pg_isready" ]; then
        "$BINDIR/pg_isready" -q -h 127.0.0.1 -p "$PORT" -U "$PG_USER" -d postgres
    else
        (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null
    fi
}

# --- Actions ----------------------------------------------------------------------------------

start() {
    need_binaries
    [ "$AS_ROOT" = 1 ] && ensure_system_user
    if running; then
        accepting || die "a server runs from $DATA but does not accept connections on 127.0.0.1:$PORT; see $DATA/server.log or run '$0 stop'"
        log "reusing the server running from $DATA on 127.0.0.1:$PORT"
        echo "$URL"
        return 0
    fi
    if (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null; then
        die "something else already listens on 127.0.0.1:$PORT; set TC_PG_PORT to a free port"
    fi
    if [ ! -f "$DATA/PG_VERSION" ]; then
        log "initialising $DATA ($("$BINDIR/initdb" --version))"
        rm -rf "$DATA"
        mkdir -p "$DATA"
        [ "$AS_ROOT" = 1 ] && chown postgres: "$DATA"
        chmod 700 "$DATA"
        as_owner "$BINDIR/initdb" -D "$DATA" -U "$PG_USER" --auth=trust --encoding=UTF8 \
            --locale=C --no-sync >"$DATA.initdb.log" 2>&1 || {
            cat "$DATA.initdb.log" >&2
            die "initdb failed"
        }
        rm -f "$DATA.initdb.log"
        # Test settings: loopback only, no durability, room for the concurrency tests' threads.
        as_owner tee -a "$DATA/postgresql.conf" >/dev/null <<EOF

# --- scripts/setup_postgres.sh: a throwaway server for tests -----------------------------
listen_addresses = '127.0.0.1'
port = $PORT
unix_socket_directories = ''  # TCP only (a deep data path would overflow a socket path)
max_connections = 200
fsync = off
synchronous_commit = off
full_page_writes = off
EOF
    fi
    log "starting PostgreSQL on 127.0.0.1:$PORT (data: $DATA)"
    if ! as_owner "$BINDIR/pg_ctl" -D "$DATA" -l "$DATA/server.log" -w -t 60 \
        -o "-p $PORT -c listen_addresses=127.0.0.1" start >&2 9>&-; then
        tail -n 30 "$DATA/server.log" >&2 || true
        die "pg_ctl start failed (log: $DATA/server.log)"
    fi
    local tries=0
    until accepting; do
        tries=$((tries + 1))
        [ "$tries" -ge 60 ] && die "the server started but does not accept connections on 127.0.0.1:$PORT"
        sleep 0.5
    done
    echo "$URL"
}

stop() {
    if running; then
        log "stopping the server running from $DATA"
        as_owner "$BINDIR/pg_ctl" -D "$DATA" -m fast -w -t 60 stop >&2
    else
        log "not running (data: $DATA)"
    fi
}

lock() {
    # Two test runs starting at once must not both run initdb: serialise on a lock file. The
    # server and apt-get must not inherit descriptor 9, or they would hold the lock for good.
    if command -v flock >/dev/null 2>&1; then
        local lockfile=${TMPDIR:-/tmp}/tool_calling-pg-$PORT.lock
        exec 9>"$lockfile"
        flock -w 300 9 || die "timed out waiting for $lockfile"
    fi
}

case "$ACTION" in
start)
    lock
    start
    ;;
status | url)
    if running && accepting; then
        echo "$URL"
    else
        log "not running (data: $DATA)"
        exit 3
    fi
    ;;
stop)
    lock
    stop
    ;;
destroy)
    lock
    stop
    log "deleting $DATA"
    rm -rf "$DATA"
    ;;
esac

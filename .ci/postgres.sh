#!/usr/bin/env bash
# A throwaway PostgreSQL server for the PostgreSQL backend tests.
#
#   eval "$(.ci/postgres.sh)"     # install if missing, start, export HIPPOGRAPH_PG_DSN
#   .ci/postgres.sh stop          # stop it and delete its data directory
#
# Installs Debian's `postgresql` package when no server binaries are present
# (needs root), then runs initdb as an unprivileged user (PostgreSQL refuses to
# run as root): `postgres` when it exists, else `nobody`. The cluster lives under
# /tmp, listens on 127.0.0.1 only, trusts local connections and runs with
# fsync off: it is for tests and holds nothing worth keeping. Running the script
# again while the server is up only prints the DSN. Progress goes to stderr;
# stdout carries only the `export` line, so `eval` is safe.
set -euo pipefail

PORT="${HIPPOGRAPH_PG_PORT:-55432}"
DATA="${HIPPOGRAPH_PG_DATA:-/tmp/hippograph-pg-$PORT}"
DB=hippograph
DSN="postgresql://postgres@127.0.0.1:$PORT/$DB"

log() { printf 'postgres.sh: %s\n' "$*" >&2; }

bindir() {
    if command -v pg_ctl >/dev/null 2>&1; then
        dirname "$(readlink -f "$(command -v pg_ctl)")"
        return
    fi
    local newest
    newest="$(find /usr/lib/postgresql -mindepth 2 -maxdepth 2 -name bin -type d 2>/dev/null | sort -V | tail -n 1)"
    [ -n "$newest" ] && [ -x "$newest/pg_ctl" ] && echo "$newest"
}

BIN="$(bindir || true)"
if [ -z "$BIN" ]; then
    if [ "$(id -u)" -ne 0 ]; then
        log "no PostgreSQL binaries found and not root: install the 'postgresql' package first"
        exit 1
    fi
    log "installing PostgreSQL (apt-get install postgresql)"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >&2
    # No default cluster (this script makes its own under /tmp): switch it off
    # in postgresql-common's config before the server package's postinst runs.
    apt-get install -y -qq --no-install-recommends postgresql-common >&2
    sed -ri 's/^#?\s*(create_main_cluster)\s*=.*$/\1 = false/' /etc/postgresql-common/createcluster.conf
    apt-get install -y -qq postgresql >&2
    BIN="$(bindir)"
fi

# Who runs the server: root may not, so hand the data directory to an unprivileged user.
if [ "$(id -u)" -eq 0 ]; then
    RUNAS="postgres"
    id "$RUNAS" >/dev/null 2>&1 || RUNAS="nobody"
    as_owner() { runuser -u "$RUNAS" -- "$@"; }
else
    RUNAS="$(id -un)"
    as_owner() { "$@"; }
fi

if [ "${1:-start}" = "stop" ]; then
    if [ -f "$DATA/PG_VERSION" ]; then
        as_owner "$BIN/pg_ctl" -D "$DATA" -m immediate stop >&2 || true
    fi
    rm -rf "$DATA"
    log "stopped; removed $DATA"
    exit 0
fi

if [ -f "$DATA/PG_VERSION" ] && as_owner "$BIN/pg_ctl" -D "$DATA" status >/dev/null 2>&1; then
    log "already running in $DATA"
else
    if [ ! -f "$DATA/PG_VERSION" ]; then
        rm -rf "$DATA"
        mkdir -p "$DATA"
        chmod 700 "$DATA"
        [ "$(id -u)" -eq 0 ] && chown "$RUNAS" "$DATA"
        log "initdb in $DATA as $RUNAS ($BIN)"
        as_owner "$BIN/initdb" -D "$DATA" -U postgres -A trust -E UTF8 --no-sync >/dev/null
    fi
    log "starting on 127.0.0.1:$PORT"
    as_owner "$BIN/pg_ctl" -D "$DATA" -l "$DATA/server.log" -w -t 60 start -o \
        "-c listen_addresses=127.0.0.1 -p $PORT -k $DATA -c max_connections=300 -c fsync=off \
         -c synchronous_commit=off -c full_page_writes=off" >&2
fi

# The test database (CREATE DATABASE has no IF NOT EXISTS; ask first).
PSQL=("$BIN/psql" -h 127.0.0.1 -p "$PORT" -U postgres -d postgres -v ON_ERROR_STOP=1 -qtA)
if [ "$("${PSQL[@]}" -c "SELECT 1 FROM pg_database WHERE datname = '$DB'")" != "1" ]; then
    "${PSQL[@]}" -c "CREATE DATABASE $DB" >&2
fi

if [ -n "${GITHUB_ENV:-}" ]; then
    echo "HIPPOGRAPH_PG_DSN=$DSN" >>"$GITHUB_ENV"
fi
log "DSN $DSN"
echo "export HIPPOGRAPH_PG_DSN='$DSN'"

#!/usr/bin/env bash
# Make sure PostgreSQL's server programs (initdb, pg_ctl) and its contrib extensions (cube,
# earthdistance, pg_trgm) are installed; on Debian/Ubuntu install them with apt when missing.
# The tests start their own throw-away cluster (tests/support/postgres.py); nothing is
# started here.
set -euo pipefail

die() { printf 'install_postgres.sh: error: %s\n' "$*" >&2; exit 1; }
log() { printf '[setup] %s\n' "$*" >&2; }

installed() {
    compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null \
        && compgen -G '/usr/share/postgresql/*/extension/earthdistance.control' >/dev/null
}

if installed; then
    log "PostgreSQL present: $(compgen -G '/usr/lib/postgresql/*/bin/initdb' | sort -V | tail -n1)"
    exit 0
fi

command -v apt-get >/dev/null 2>&1 \
    || die "PostgreSQL server + contrib not found and apt-get is unavailable: install them, or set STACK_TEST_POSTGRES_DSN to a server to use"
SUDO=()
if ((EUID != 0)); then
    command -v sudo >/dev/null 2>&1 || die "installing PostgreSQL needs root (or sudo)"
    SUDO=(sudo)
fi
log "installing PostgreSQL with apt-get"
"${SUDO[@]}" apt-get update -qq
DEBIAN_FRONTEND=noninteractive "${SUDO[@]}" apt-get install -y -qq postgresql postgresql-contrib >/dev/null
installed || die "apt-get installed postgresql but initdb or the contrib extensions are still missing"
log "PostgreSQL installed: $(compgen -G '/usr/lib/postgresql/*/bin/initdb' | sort -V | tail -n1)"

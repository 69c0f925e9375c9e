#!/usr/bin/env bash
# Make sure redis-server is installed (the limiter's tests start their own servers:
# tests/support/redis.py); on Debian/Ubuntu install Debian's redis-server with apt when missing.
# Nothing is started here.
set -euo pipefail

die() { printf 'install_redis.sh: error: %s\n' "$*" >&2; exit 1; }
log() { printf '[setup] %s\n' "$*" >&2; }

if command -v redis-server >/dev/null 2>&1; then
    log "Redis present: $(redis-server --version | cut -d' ' -f3)"
    exit 0
fi

command -v apt-get >/dev/null 2>&1 \
    || die "redis-server not found and apt-get is unavailable: install Redis 7, or set STACK_TEST_REDIS_SERVER to its redis-server"
SUDO=()
if ((EUID != 0)); then
    command -v sudo >/dev/null 2>&1 || die "installing Redis needs root (or sudo)"
    SUDO=(sudo)
fi
log "installing redis-server with apt-get"
"${SUDO[@]}" apt-get update -qq
DEBIAN_FRONTEND=noninteractive "${SUDO[@]}" apt-get install -y -qq redis-server >/dev/null
# Debian's package starts a system service on 6379; the tests never use it (they start their own).
command -v redis-server >/dev/null 2>&1 || die "apt-get installed redis-server but it is not on PATH"
log "Redis installed: $(redis-server --version | cut -d' ' -f3)"

#!/usr/bin/env bash
# Make sure Debian's nginx is installed: the benchmark's compiled-relay reference (bench/nginx.py,
# measured by `python -m bench.run` beside the gateway and the bare aiohttp relay) and its tests
# (tests/bench/test_nginx.py). On Debian/Ubuntu install it with apt when missing. Nothing is
# started here, and the distribution's own site is never used: the benchmark runs nginx with a
# configuration of its own in a temporary directory. Idempotent.
set -euo pipefail

NGINX="${STACK_BENCH_NGINX:-/usr/sbin/nginx}"

die() { printf 'install_nginx.sh: error: %s\n' "$*" >&2; exit 1; }
log() { printf '[setup] %s\n' "$*" >&2; }

if [[ -x "$NGINX" ]]; then
    log "nginx present: $NGINX ($("$NGINX" -v 2>&1))"
    exit 0
fi

command -v apt-get >/dev/null 2>&1 \
    || die "$NGINX not found and apt-get is unavailable: install nginx, or set STACK_BENCH_NGINX to its path"
SUDO=()
if ((EUID != 0)); then
    command -v sudo >/dev/null 2>&1 || die "installing nginx needs root (or sudo)"
    SUDO=(sudo)
fi
log "installing nginx with apt-get"
"${SUDO[@]}" apt-get update -qq
# nginx-light would do, but Debian 12's `nginx` is the package the issue names; no service is
# started in a container without systemd, and a started one is left alone (own config, own ports).
DEBIAN_FRONTEND=noninteractive "${SUDO[@]}" apt-get install -y -qq nginx >/dev/null
[[ -x "$NGINX" ]] || die "apt-get installed nginx but $NGINX is still missing"
log "nginx installed: $NGINX ($("$NGINX" -v 2>&1))"

#!/usr/bin/env bash
# Make sure Prometheus and promtool are installed for the tests of the shipped operations files
# (deploy/prometheus, tests/deploy): on Debian/Ubuntu install Debian's `prometheus` package with
# apt when either is missing. The package's own service is not started: the tests start their
# own server on a free port (tests/support/prometheus.py), and a server listening on :9090 for
# the rest of the run would only be in the way. Idempotent.
set -euo pipefail

PROMETHEUS="${STACK_TEST_PROMETHEUS:-/usr/bin/prometheus}"
PROMTOOL="${STACK_TEST_PROMTOOL:-/usr/bin/promtool}"

die() { printf 'install_prometheus.sh: error: %s\n' "$*" >&2; exit 1; }
log() { printf '[setup] %s\n' "$*" >&2; }

version() { "$PROMETHEUS" --version 2>&1 | head -n1; }

if [[ -x "$PROMETHEUS" && -x "$PROMTOOL" ]]; then
    log "Prometheus present: $(version)"
    exit 0
fi

command -v apt-get >/dev/null 2>&1 \
    || die "$PROMETHEUS or $PROMTOOL not found and apt-get is unavailable: install Prometheus, or set STACK_TEST_PROMETHEUS and STACK_TEST_PROMTOOL to its programs"
SUDO=()
if ((EUID != 0)); then
    command -v sudo >/dev/null 2>&1 || die "installing Prometheus needs root (or sudo)"
    SUDO=(sudo)
fi

# Keep the package from starting its service: a policy-rc.d that says "no" (101), only for
# this install and only when the machine has none of its own.
POLICY=/usr/sbin/policy-rc.d
if [[ ! -e "$POLICY" ]]; then
    printf '#!/bin/sh\nexit 101\n' | "${SUDO[@]}" tee "$POLICY" >/dev/null
    "${SUDO[@]}" chmod 755 "$POLICY"
    trap '"${SUDO[@]}" rm -f "$POLICY"' EXIT
fi

log "installing Prometheus with apt-get"
"${SUDO[@]}" apt-get update -qq
DEBIAN_FRONTEND=noninteractive "${SUDO[@]}" apt-get install -y -qq --no-install-recommends prometheus >/dev/null
[[ -x "$PROMETHEUS" && -x "$PROMTOOL" ]] || die "apt-get installed prometheus but $PROMETHEUS or $PROMTOOL is still missing"
log "Prometheus installed: $(version)"

#!/usr/bin/env bash
# Make sure shellcheck is installed for the lint stage (scripts/lint.sh checks every shell
# script with it); on Debian/Ubuntu install Debian's `shellcheck` with apt when missing.
# Idempotent.
set -euo pipefail

die() { printf 'install_shellcheck.sh: error: %s\n' "$*" >&2; exit 1; }
log() { printf '[setup] %s\n' "$*" >&2; }

if command -v shellcheck >/dev/null 2>&1; then
    log "shellcheck present: $(shellcheck --version | sed -n 's/^version: //p')"
    exit 0
fi

command -v apt-get >/dev/null 2>&1 || die "shellcheck not found and apt-get is unavailable: install shellcheck"
SUDO=()
if ((EUID != 0)); then
    command -v sudo >/dev/null 2>&1 || die "installing shellcheck needs root (or sudo)"
    SUDO=(sudo)
fi
log "installing shellcheck with apt-get"
"${SUDO[@]}" apt-get update -qq
DEBIAN_FRONTEND=noninteractive "${SUDO[@]}" apt-get install -y -qq shellcheck >/dev/null
command -v shellcheck >/dev/null 2>&1 || die "apt-get installed shellcheck but it is still not on PATH"
log "shellcheck installed: $(shellcheck --version | sed -n 's/^version: //p')"

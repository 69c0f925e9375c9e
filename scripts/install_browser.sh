#!/usr/bin/env bash
# Make sure a headless Chromium is installed for the playground's browser tests
# (tests/playground); on Debian/Ubuntu install Debian's `chromium` with apt when
# /usr/bin/chromium is missing. Playwright drives it through `executable_path`: Playwright's own
# browser download needs servers these machines cannot reach. Idempotent.
set -euo pipefail

CHROMIUM="${STACK_TEST_CHROMIUM:-/usr/bin/chromium}"

die() { printf 'install_browser.sh: error: %s\n' "$*" >&2; exit 1; }
log() { printf '[setup] %s\n' "$*" >&2; }

if [[ -x "$CHROMIUM" ]]; then
    log "Chromium present: $CHROMIUM ($("$CHROMIUM" --version 2>/dev/null || echo 'version unknown'))"
    exit 0
fi

command -v apt-get >/dev/null 2>&1 \
    || die "$CHROMIUM not found and apt-get is unavailable: install Chromium, or set STACK_TEST_CHROMIUM to its path"
SUDO=()
if ((EUID != 0)); then
    command -v sudo >/dev/null 2>&1 || die "installing Chromium needs root (or sudo)"
    SUDO=(sudo)
fi
log "installing Chromium with apt-get"
"${SUDO[@]}" apt-get update -qq
DEBIAN_FRONTEND=noninteractive "${SUDO[@]}" apt-get install -y -qq chromium >/dev/null
[[ -x "$CHROMIUM" ]] || die "apt-get installed chromium but $CHROMIUM is still missing"
log "Chromium installed: $CHROMIUM ($("$CHROMIUM" --version 2>/dev/null || echo 'version unknown'))"

#!/usr/bin/env bash
# Create or update the gateway's virtual environment: pip install -e '.[test,bench]'.
#
# Idempotent and quick when nothing changed: a stamp in the venv records the hash of the
# pyproject.toml it was installed from, so a dependency change triggers a reinstall and
# nothing else does.
#
#   GATEWAY_VENV    where [.venvs/gateway]
#   GATEWAY_PYTHON  interpreter that creates it (3.11+) [python3]
set -euo pipefail

ROOT="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/.." && pwd)"
GATEWAY_VENV="${GATEWAY_VENV:-$ROOT/.venvs/gateway}"
PYTHON="${GATEWAY_PYTHON:-python3}"
VPY="$GATEWAY_VENV/bin/python"
STAMP="$GATEWAY_VENV/.stack-gateway-installed"

die() { printf 'setup_gateway_env.sh: error: %s\n' "$*" >&2; exit 1; }
log() { printf '[setup] %s\n' "$*" >&2; }

wanted="pyproject-sha256=$(sha256sum "$ROOT/pyproject.toml" | cut -d' ' -f1) extras=test,bench"
if [[ -x "$VPY" && -f "$STAMP" && "$(cat "$STAMP")" == "$wanted" ]]; then
    log "gateway environment up to date: $GATEWAY_VENV"
    exit 0
fi

if [[ ! -x "$VPY" ]]; then
    command -v "$PYTHON" >/dev/null 2>&1 || die "$PYTHON not found (set GATEWAY_PYTHON to a Python 3.11+)"
    "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
        || die "$PYTHON is $("$PYTHON" -V 2>&1); the gateway needs Python 3.11+ (set GATEWAY_PYTHON)"
    log "creating the gateway environment $GATEWAY_VENV"
    mkdir -p "$(dirname "$GATEWAY_VENV")"
    "$PYTHON" -m venv "$GATEWAY_VENV" \
        || die "could not create $GATEWAY_VENV (on Debian/Ubuntu: apt-get install python3-venv)"
fi
log "installing the gateway and its test dependencies into $GATEWAY_VENV"
"$VPY" -m pip install --quiet -e "${ROOT}[test,bench]" || die "pip install -e '.[test,bench]' failed (see above)"
printf '%s\n' "$wanted" >"$STAMP"
log "gateway environment ready: $GATEWAY_VENV"

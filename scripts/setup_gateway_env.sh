#!/usr/bin/env bash
# Create or update the gateway's virtual environment: pip install -c constraints.txt -e '.[test,bench]'.
#
# Every package at the version constraints.txt pins (docs/testing.md#dependencies); a
# constraints.txt that pins no version of a dependency of pyproject.toml, or one outside its
# range, stops the setup with the fix (`make constraints`) instead of installing unpinned.
# The pinned wheels are kept in a wheelhouse: a later install (a changed pyproject.toml, the
# image test's fresh environment) reads them from the disk, and asks the index only for what
# it lacks (pip's own cache does not keep them: the package index here marks them uncacheable).
#
# Idempotent and quick when nothing changed: a stamp in the venv records the hashes of the
# pyproject.toml and constraints.txt it was installed from, so a dependency change triggers a
# reinstall and nothing else does.
#
#   GATEWAY_VENV    where [.venvs/gateway]
#   GATEWAY_PYTHON  interpreter that creates it (3.11+) [python3]
#   GATEWAY_WHEELS  the wheelhouse [.cache/wheels]
set -euo pipefail

ROOT="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/.." && pwd)"
GATEWAY_VENV="${GATEWAY_VENV:-$ROOT/.venvs/gateway}"
PYTHON="${GATEWAY_PYTHON:-python3}"
VPY="$GATEWAY_VENV/bin/python"
STAMP="$GATEWAY_VENV/.stack-gateway-installed"
WHEELS="${GATEWAY_WHEELS:-$ROOT/.cache/wheels}"

die() { printf 'setup_gateway_env.sh: error: %s\n' "$*" >&2; exit 1; }
log() { printf '[setup] %s\n' "$*" >&2; }

CONSTRAINTS="$ROOT/constraints.txt"
[[ -f "$CONSTRAINTS" ]] || die "$CONSTRAINTS is missing (make constraints writes it)"
wanted="pyproject-sha256=$(sha256sum "$ROOT/pyproject.toml" | cut -d' ' -f1)"
wanted+=" constraints-sha256=$(sha256sum "$CONSTRAINTS" | cut -d' ' -f1) extras=test,bench"
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
"$VPY" "$ROOT/scripts/constraints.py" check || die "constraints.txt is stale (see above)"
install() {
    "$VPY" -m pip install --quiet --no-index --find-links "$WHEELS" --constraint "$CONSTRAINTS" -e "${ROOT}[test,bench]"
}
log "installing the gateway and its test dependencies into $GATEWAY_VENV"
mkdir -p "$WHEELS"
if ! install 2>/dev/null; then
    log "downloading the pinned packages into $WHEELS"
    mapfile -t build_requires < <("$VPY" "$ROOT/scripts/constraints.py" build-requires)
    "$VPY" -m pip download --quiet --dest "$WHEELS" --find-links "$WHEELS" --constraint "$CONSTRAINTS" \
        "${ROOT}[test,bench]" "${build_requires[@]}" \
        || die "pip download -c constraints.txt '.[test,bench]' failed (see above)"
    install || die "pip install -c constraints.txt -e '.[test,bench]' failed (see above)"
fi
printf '%s\n' "$wanted" >"$STAMP"
log "gateway environment ready: $GATEWAY_VENV"

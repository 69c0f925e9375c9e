#!/usr/bin/env bash
# The other ASGI servers bench.run can serve the gateway with (--servers), in an environment of
# their own so the gateway's stays exactly what pyproject.toml says: .venvs/bench-servers holds
# granian, hypercorn and (when a wheel installs) socketify, and sees every package of the gateway
# environment behind its own (a .pth file), so the gateway, uvicorn and uvloop are the very same
# installs in every server compared. uvicorn with h11 needs nothing more (h11 comes with httpx).
# Only the benchmark uses it; `make test` does not. Idempotent.
#
#   GATEWAY_VENV        the gateway environment [.venvs/gateway]
#   BENCH_SERVERS_VENV  where [.venvs/bench-servers]
set -euo pipefail

ROOT="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/.." && pwd)"
GATEWAY_VENV="${GATEWAY_VENV:-$ROOT/.venvs/gateway}"
SERVERS_VENV="${BENCH_SERVERS_VENV:-$ROOT/.venvs/bench-servers}"
REQUIRED=("granian[uvloop]>=2.5" "hypercorn>=0.17")
OPTIONAL=("socketify")

die() { printf 'install_bench_servers.sh: error: %s\n' "$*" >&2; exit 1; }
log() { printf '[setup] %s\n' "$*" >&2; }

[[ -x "$GATEWAY_VENV/bin/python" ]] || die "no gateway environment at $GATEWAY_VENV (run scripts/setup_gateway_env.sh)"
if [[ ! -x "$SERVERS_VENV/bin/python" ]]; then
    log "creating $SERVERS_VENV"
    "$GATEWAY_VENV/bin/python" -m venv "$SERVERS_VENV"
fi
site_of() { "$1/bin/python" -c 'import sysconfig; print(sysconfig.get_path("purelib"))'; }
# An `import` line in a .pth file runs at start-up: addsitedir also reads the gateway
# environment's own .pth files (its editable install of this repository).
printf 'import site; site.addsitedir(%s)\n' "'$(site_of "$GATEWAY_VENV")'" >"$(site_of "$SERVERS_VENV")/_gateway_env.pth"
log "installing ${REQUIRED[*]} into $SERVERS_VENV"
"$SERVERS_VENV/bin/python" -m pip install --quiet "${REQUIRED[@]}" || die "pip install ${REQUIRED[*]} failed"
for package in "${OPTIONAL[@]}"; do
    if "$SERVERS_VENV/bin/python" -m pip install --quiet "$package"; then
        log "installed $package"
    else
        log "$package did not install: bench.run reports it as not measured"
    fi
done
"$SERVERS_VENV/bin/python" -c 'import gateway, granian, hypercorn, uvicorn' \
    || die "$SERVERS_VENV cannot import the gateway and the servers together"
log "bench servers ready: $SERVERS_VENV"

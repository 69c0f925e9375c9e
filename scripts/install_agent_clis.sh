#!/usr/bin/env bash
# Install the coding agents the tests run against the gateway (tests/clients): Claude Code and
# Codex CLI, pinned, from npm into a local prefix (.cache/agent-clis); Node and npm from Debian
# with apt when missing. Each package ships its native binary inside a platform package of its
# own (an optional dependency), so nothing is downloaded at install time beyond npm's registry.
# Idempotent: a stamp records the versions installed.
#
#   AGENT_CLIS_PREFIX  where [.cache/agent-clis]
set -euo pipefail

ROOT="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/.." && pwd)"
PREFIX="${AGENT_CLIS_PREFIX:-$ROOT/.cache/agent-clis}"
# The versions docs/clients/compatibility.md lists as tested.
CLAUDE_CODE="@anthropic-ai/claude-code@2.1.332"
CODEX="@openai/codex@0.171.0"
STAMP="$PREFIX/.stack-agent-clis"

die() { printf 'install_agent_clis.sh: error: %s\n' "$*" >&2; exit 1; }
log() { printf '[setup] %s\n' "$*" >&2; }

if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
    command -v apt-get >/dev/null 2>&1 || die "node and npm not found and apt-get is unavailable: install Node.js 18+"
    SUDO=()
    if ((EUID != 0)); then
        command -v sudo >/dev/null 2>&1 || die "installing Node.js needs root (or sudo)"
        SUDO=(sudo)
    fi
    log "installing Node.js and npm with apt-get"
    "${SUDO[@]}" apt-get update -qq
    DEBIAN_FRONTEND=noninteractive "${SUDO[@]}" apt-get install -y -qq nodejs npm >/dev/null
fi

wanted="$CLAUDE_CODE $CODEX"
if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$wanted" && -x "$PREFIX/node_modules/.bin/claude" \
      && -x "$PREFIX/node_modules/.bin/codex" ]]; then
    log "agent CLIs present: $wanted ($PREFIX)"
    exit 0
fi
mkdir -p "$PREFIX"
log "installing $wanted into $PREFIX (node $(node --version))"
npm install --prefix "$PREFIX" --no-audit --no-fund --no-update-notifier --loglevel=error \
    "$CLAUDE_CODE" "$CODEX" >&2 || die "npm install $wanted failed (see above)"
HOME="$(mktemp -d)" "$PREFIX/node_modules/.bin/claude" --version >/dev/null \
    || die "claude does not run after install (its native package missing?)"
printf '%s\n' "$wanted" >"$STAMP"
log "agent CLIs installed: $wanted"

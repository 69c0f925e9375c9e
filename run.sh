#!/usr/bin/env bash
# run.sh (`make run`): the whole stack on this machine. Creates both environments, builds the
# embedded model if needed, starts the vLLM engine (launch_vllm.sh) and the gateway, prints how
# to call it. Ctrl-C (or SIGTERM) stops both, the gateway first, and exits 0; a second Ctrl-C
# while they stop kills them at once.
#
#   GATEWAY_HOST / GATEWAY_PORT  where the gateway listens [127.0.0.1 / 8000]
#   VLLM_HOST / VLLM_PORT        where the engine listens [127.0.0.1 / 8001]
#   ENGINE_COUNT                 engines to start, on VLLM_PORT, VLLM_PORT+1, ...; the gateway routes
#                                over all of them (VLLM_BASE_URLS) [1]
#   VLLM_BASE_URL                use an engine that already runs there instead of starting one
#                                (VLLM_BASE_URLS / VLLM_DNS_URL: a fleet that already runs)
#   VLLM_API_KEY                 engine <-> gateway secret [random per run]
#   DATABASE_URL                 [sqlite+aiosqlite:///<repo>/data/stack.db]
#   SEED_DEMO_DATA               [true]
#   GATEWAY_START_TIMEOUT        seconds the gateway may take to report ready [60]
#   Everything launch_vllm.sh reads (MODEL, MAX_MODEL_LEN, ...) and the gateway reads
#   (API_KEYS, SESSION_STORE, ...) passes through.
set -euo pipefail

ROOT="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd)"
cd "$ROOT"
GATEWAY_VENV="${GATEWAY_VENV:-$ROOT/.venvs/gateway}"
GATEWAY_HOST="${GATEWAY_HOST:-127.0.0.1}"
GATEWAY_PORT="${GATEWAY_PORT:-8000}"
export VLLM_HOST="${VLLM_HOST:-127.0.0.1}"
export VLLM_PORT="${VLLM_PORT:-8001}"
export ENGINE_COUNT="${ENGINE_COUNT:-1}"
DATA_DIR="$ROOT/data"
LOG_DIR="$DATA_DIR/logs"
GATEWAY_START_TIMEOUT="${GATEWAY_START_TIMEOUT:-60}"

log() { printf '[run] %s\n' "$*" >&2 || true; }  # never fails: after SIGHUP the terminal may be gone
die() { printf 'run.sh: error: %s\n' "$*" >&2; exit 1; }

scripts/setup_gateway_env.sh
VPY="$GATEWAY_VENV/bin/python"

problem="$("$VPY" "$ROOT/scripts/port_problem.py" "$GATEWAY_HOST" "$GATEWAY_PORT")"
[[ -z "$problem" ]] || die "gateway port $GATEWAY_PORT on $GATEWAY_HOST: $problem (set GATEWAY_PORT)"

mkdir -p "$LOG_DIR"
LAUNCHER_PID=""
GATEWAY_PID=""

alive() { [[ -n "$1" ]] && kill -0 "$1" 2>/dev/null; }

# The engine and the gateway each run in a process group of their own (job control on just for
# the `&`), so the terminal's Ctrl-C, which goes to the whole foreground group, reaches make and
# this script only, and this script stops them in order. When every process got the SIGINT at
# once, the engine stopped under the gateway that was still draining its streams, and
# launch_vllm.sh, which cannot trap SIGINT as a background job, reported "engine stopped
# unexpectedly". Their stdin is /dev/null: a background group reading the terminal is stopped.
in_own_group() { set -m; "$@" </dev/null & set +m; }

# Gateway first (it drains its streams while the engine still answers), then the engine; wait for
# both. A signal during the stop ends both at once (their whole process groups).
# shellcheck disable=SC2317  # runs from traps
stop_all() {
    trap stop_now INT TERM HUP
    if alive "$GATEWAY_PID"; then
        log "stopping the gateway"
        kill -TERM "$GATEWAY_PID" 2>/dev/null || true
        wait "$GATEWAY_PID" 2>/dev/null || true
    fi
    if alive "$LAUNCHER_PID"; then
        log "stopping the engine"
        kill -TERM "$LAUNCHER_PID" 2>/dev/null || true
        wait "$LAUNCHER_PID" 2>/dev/null || true
    fi
}
# shellcheck disable=SC2317
stop_now() {
    log "stopping at once"
    local pid
    for pid in "$GATEWAY_PID" "$LAUNCHER_PID"; do
        if [[ -n "$pid" ]]; then kill -KILL -- "-$pid" 2>/dev/null || true; fi
    done
    for pid in "$GATEWAY_PID" "$LAUNCHER_PID"; do
        if [[ -n "$pid" ]]; then wait "$pid" 2>/dev/null || true; fi
    done
}
# shellcheck disable=SC2317
on_signal() { stop_all; trap - EXIT; log "stopped"; exit 0; }
trap stop_all EXIT
trap on_signal INT TERM HUP

pause() { sleep "$1" & wait $! || true; }

http_ok() { curl -fsS -o /dev/null --max-time 2 "$1" 2>/dev/null; }

ENGINE_URLS=()
if [[ -n "${VLLM_BASE_URLS:-}${VLLM_DNS_URL:-}" ]]; then
    log "using the engine fleet of VLLM_BASE_URLS / VLLM_DNS_URL (the gateway checks each engine itself)"
elif [[ -n "${VLLM_BASE_URL:-}" ]]; then
    VLLM_BASE_URL="${VLLM_BASE_URL%/}"
    log "using the engine at $VLLM_BASE_URL (VLLM_BASE_URL is set)"
    http_ok "$VLLM_BASE_URL/health" || die "no engine answers at $VLLM_BASE_URL/health"
else
    ./launch_vllm.sh --install-only
    if [[ -z "${VLLM_API_KEY:-}" ]]; then
        VLLM_API_KEY="$("$VPY" -c 'import secrets; print(secrets.token_urlsafe(24))')"
    fi
    export VLLM_API_KEY
    case "$VLLM_HOST" in 0.0.0.0 | "") probe_host=127.0.0.1 ;; *) probe_host="$VLLM_HOST" ;; esac
    for ((i = 0; i < ENGINE_COUNT; i++)); do ENGINE_URLS+=("http://$probe_host:$((VLLM_PORT + i))"); done
    VLLM_BASE_URL="${ENGINE_URLS[0]}"
    # One engine logs to engine.log; a fleet's engines to engine-PORT.log each.
    in_own_group env ENGINE_LOG="$LOG_DIR/engine.log" ENGINE_LOG_TO_STDOUT=false ./launch_vllm.sh
    LAUNCHER_PID=$!
    for url in "${ENGINE_URLS[@]}"; do
        until http_ok "$url/health"; do
            if ! alive "$LAUNCHER_PID"; then
                code=0
                wait "$LAUNCHER_PID" || code=$?
                LAUNCHER_PID=""
                exit "$((code == 0 ? 1 : code))"  # launch_vllm.sh has printed the reason
            fi
            pause 0.5
        done
    done
    if ((ENGINE_COUNT > 1)); then
        VLLM_BASE_URLS="$(IFS=,; printf '%s' "${ENGINE_URLS[*]}")"
        export VLLM_BASE_URLS
    fi
fi

[[ -n "${VLLM_BASE_URL:-}" ]] && export VLLM_BASE_URL
export DATABASE_URL="${DATABASE_URL:-sqlite+aiosqlite:///$DATA_DIR/stack.db}"
export SEED_DEMO_DATA="${SEED_DEMO_DATA:-true}"
# The database URL as it may be shown: its password (postgresql://user:PASSWORD@host/db) as ***.
shown_database="$(sed -E 's#^([^:/]+://[^:/@]*):[^/]*@#\1:***@#' <<<"$DATABASE_URL")"
log "starting the gateway on http://$GATEWAY_HOST:$GATEWAY_PORT (database: $shown_database)"
in_own_group env HOST="$GATEWAY_HOST" PORT="$GATEWAY_PORT" "$GATEWAY_VENV/bin/stack-gateway"
GATEWAY_PID=$!

case "$GATEWAY_HOST" in 0.0.0.0 | "") gateway_probe=127.0.0.1 ;; *) gateway_probe="$GATEWAY_HOST" ;; esac
GATEWAY_URL="http://$gateway_probe:$GATEWAY_PORT"
deadline=$((SECONDS + GATEWAY_START_TIMEOUT))
until http_ok "$GATEWAY_URL/readyz"; do
    alive "$GATEWAY_PID" || die "the gateway exited during start-up (its log is above)"
    ((SECONDS < deadline)) || die "the gateway did not report ready within ${GATEWAY_START_TIMEOUT}s ($GATEWAY_URL/readyz)"
    pause 0.5
done

# /health names the model only to a caller with a key: send the first key given in clear (on
# stdin, so it stays out of `ps`); with hashed keys only, the example shows a placeholder.
health_key=""
IFS=',' read -r -a given_keys <<<"${ADMIN_API_KEYS:-},${API_KEYS:-}"
for key in "${given_keys[@]}"; do
    key="${key//[[:space:]]/}"
    if [[ -n "$key" && "$key" != sha256:* ]]; then health_key="$key"; break; fi
done
model="$(curl -fsS --max-time 5 -H @- "$GATEWAY_URL/health" <<<"${health_key:+Authorization: Bearer $health_key}" \
    | "$VPY" -c 'import json, sys; print(json.load(sys.stdin).get("model_path") or "<model>")')"
auth=""
if [[ -n "${API_KEYS:-}${ADMIN_API_KEYS:-}" ]]; then auth=" -H 'Authorization: Bearer <one of API_KEYS>'"; fi
request="{\"model\": \"$model\", \"messages\": [{\"role\": \"user\", \"content\": \"Hello\"}], \"max_tokens\": 32}"

cat >&2 <<EOF

  The stack is up.
    gateway  $GATEWAY_URL      (OpenAI API at $GATEWAY_URL/v1)
    engine   ${VLLM_BASE_URLS:-${VLLM_DNS_URL:-$VLLM_BASE_URL}}      model: $model${LAUNCHER_PID:+ (logs: $LOG_DIR/engine*.log)}
    database $shown_database

  Try:
    curl $GATEWAY_URL/health$auth
    curl $GATEWAY_URL/v1/chat/completions$auth -H 'Content-Type: application/json' \\
      -d '$request'

  Ctrl-C stops both.

EOF
if [[ "$model" == qwen3-embedded ]]; then
    log "note: the embedded model has random weights, so its answers are gibberish (it exercises the serving path)"
fi

code=0
wait -n ${LAUNCHER_PID:+"$LAUNCHER_PID"} "$GATEWAY_PID" || code=$?
if ! alive "$GATEWAY_PID"; then
    die "the gateway stopped (exit code $code); stopping the engine"
fi
die "the engine stopped (exit code $code); stopping the gateway"

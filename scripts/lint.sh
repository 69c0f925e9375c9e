#!/usr/bin/env bash
# The lint, one definition for `make lint` and the test command's lint stage (scripts/test.sh):
# ruff over every Python tree, the import contracts of pyproject.toml (lint-imports), and every
# shell script through shellcheck. Runs all three and fails if any failed.
#
#   GATEWAY_VENV  the environment holding ruff and lint-imports [.venvs/gateway]
set -uo pipefail

ROOT="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT" || exit 1
GATEWAY_VENV="${GATEWAY_VENV:-$ROOT/.venvs/gateway}"
PYTHON_TREES=(gateway marketplace playground bench tests scripts engine)
SHELL_SCRIPTS=(launch_vllm.sh run.sh scripts/*.sh .ci/run)

status=0
"$GATEWAY_VENV/bin/ruff" check "${PYTHON_TREES[@]}" || status=1
"$GATEWAY_VENV/bin/lint-imports" || status=1
shellcheck "${SHELL_SCRIPTS[@]}" || status=1
exit "$status"

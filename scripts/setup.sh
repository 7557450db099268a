#!/usr/bin/env bash
# Creates .venv (if needed) and installs TidalMQ with the extras named in $1 (e.g. "test").
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
extras=${1:-}
stamp=".venv/.installed-${extras:-base}"
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  .venv/bin/python -m pip install -q --upgrade pip >/dev/null
  if [ -n "$extras" ]; then
    .venv/bin/python -m pip install -q -e ".[${extras}]"
  else
    .venv/bin/python -m pip install -q -e .
  fi
  touch "$stamp"
fi

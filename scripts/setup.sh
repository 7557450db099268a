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
  # A .venv from before the gRPC endpoint may hold rocketmq==0.4.4, whose `rocketmq` package would clash
  # with the 5.x client's: it moved to .venv-rmq4 (below).
  if .venv/bin/python -m pip show -q rocketmq >/dev/null 2>&1; then
    .venv/bin/python -m pip uninstall -y -q rocketmq
  fi
  if [ -n "$extras" ]; then
    .venv/bin/python -m pip install -q -e ".[${extras}]"
  else
    .venv/bin/python -m pip install -q -e .
  fi
  touch "$stamp"
fi
# The official 4.x client (pyproject's `rmq4` list) in a venv of its own: rocketmq==0.4.4 and the 5.x client
# in .venv both install a top-level `rocketmq`. Its agents need neither TidalMQ nor anything but the stdlib.
if [[ ",$extras," == *",test,"* ]]; then
  if [ ! -x .venv-rmq4/bin/python ]; then
    "$PY" -m venv .venv-rmq4
  fi
  if [ ! -f .venv-rmq4/.installed ] || [ pyproject.toml -nt .venv-rmq4/.installed ]; then
    mapfile -t rmq4 < <(.venv/bin/python -c 'import tomllib; print(*tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"]["rmq4"], sep="\n")')
    .venv-rmq4/bin/python -m pip install -q "${rmq4[@]}"
    touch .venv-rmq4/.installed
  fi
fi

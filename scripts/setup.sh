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
# Bytecode for TidalMQ's own modules: the editable install writes none (pip compiles a regular install's),
# and where PYTHONDONTWRITEBYTECODE is set (as in many CI containers) every start would compile them all
# again: ~0.2 s of a ~0.6 s standalone start, and of each schedule process's. Files already compiled are
# skipped; a source edited later has a stale .pyc, which Python ignores (it compiles that one in memory).
if ! .venv/bin/python -m compileall -q -j 0 src/tidalmq >/dev/null; then
  echo "setup: src/tidalmq could not be compiled (read-only?): each start compiles what it imports" >&2
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
# The official 5.x Node.js client for tests/grpc/test_node.py, exactly as package-lock.json pins it
# (node and npm come from Debian, scripts/setup-system.sh); without node the test skips.
if [[ ",$extras," == *",test,"* ]] && command -v npm >/dev/null && command -v node >/dev/null; then
  nd=tests/grpc/node
  if [ ! -f "$nd/node_modules/.installed" ] || [ "$nd/package-lock.json" -nt "$nd/node_modules/.installed" ]; then
    if (cd "$nd" && npm ci --no-audit --no-fund --loglevel=error >/dev/null); then
      touch "$nd/node_modules/.installed"
    else
      echo "setup: npm ci in $nd failed; tests/grpc/test_node.py will skip" >&2
    fi
  fi
fi

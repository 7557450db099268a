#!/usr/bin/env bash
# Installs TidalMQ into .venv and runs the standalone broker (NameServer 9876 + Broker 10911)
# on the default data directory (~/.tidalmq, or --data-dir DIR). Extra arguments go to
# `tidalmq standalone`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/tidalmq standalone "$@"

#!/usr/bin/env bash
# One command: install the peers (Debian packages + pinned Python clients) and run the comparison.
#   bash bench/compare/run.sh [--no-install] [--quick] [--peer redis] [--workload W2]
set -euo pipefail
cd "$(dirname "$0")/../.."
install=1
args=()
for a in "$@"; do
  if [ "$a" = "--no-install" ]; then install=0; else args+=("$a"); fi
done
[ -x .venv/bin/python ] || bash scripts/setup.sh
[ "$install" = 1 ] && bash bench/compare/install.sh
exec .venv/bin/python -m bench.compare "${args[@]}"

#!/usr/bin/env bash
# One command: install the peers (Debian packages + pinned Python clients) and run the comparison.
#   bash bench/compare/run.sh [--no-install] [--quick] [--with-1e8] [--peer redis] [--workload W2]
# The full run (no flags) takes ~30-75 min on a 2-core machine and ~8 GiB of free disk; --with-1e8 adds
# W6 at 10^8 pending (~15-45 min more, ~56 GiB written: it checks for ~70 GiB free before anything starts).
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

#!/usr/bin/env bash
# System packages the test suite needs beyond .venv, installed with apt-get only when run as root on a
# Debian-like system and missing; otherwise it says why it did nothing (those tests then skip, loudly):
# - fuse3 (fusermount3 and libfuse3.so.3) for the power-loss harness in tests/faults/;
# - etcd-server (the etcd binary) for controller mode's tests in tests/controller/ (docs/replication.md);
# - chromium and chromium-driver, the headless browser that tests/console/ drives through selenium (docs/console.md);
# - nodejs and npm for the official 5.x Node.js client in tests/grpc/test_node.py (docs/grpc.md);
# - iproute2 (`ip netns`, veth, bridge) for the test hosts of tests/netns/ (docs/cluster.md).
set -euo pipefail
missing=()
for pkg in fuse3 etcd-server chromium chromium-driver nodejs iproute2; do
  if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$pkg")
  fi
done
# Debian splits npm from nodejs; some nodejs builds bring their own npm, which Debian's would conflict with.
if ! command -v npm >/dev/null && ! dpkg-query -W -f='${Status}' npm 2>/dev/null | grep -q "install ok installed"; then
  missing+=(npm)
fi
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
  echo "setup-system: ${missing[*]} missing and not root with apt-get; tests/faults, tests/controller, tests/console or tests/grpc/test_node.py will skip" >&2
  exit 0
fi
export DEBIAN_FRONTEND=noninteractive
if ! { apt-get update -qq && apt-get install -y -qq --no-install-recommends "${missing[@]}"; } >/dev/null; then
  echo "setup-system: apt-get install ${missing[*]} failed; tests/faults, tests/controller, tests/console or tests/grpc/test_node.py will skip" >&2
fi

#!/usr/bin/env bash
# System packages the test suite needs beyond .venv: fuse3 (fusermount3 and libfuse3.so.3) for the
# power-loss harness in tests/faults/. Installs with apt-get only when run as root on a Debian-like
# system and the package is missing; otherwise it says why it did nothing (those tests then skip, loudly).
set -euo pipefail
if dpkg-query -W -f='${Status}' fuse3 2>/dev/null | grep -q "install ok installed"; then
  exit 0
fi
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
  echo "setup-system: fuse3 missing and not root with apt-get; tests/faults will skip" >&2
  exit 0
fi
export DEBIAN_FRONTEND=noninteractive
if ! { apt-get update -qq && apt-get install -y -qq --no-install-recommends fuse3; } >/dev/null; then
  echo "setup-system: apt-get install fuse3 failed; tests/faults will skip" >&2
fi

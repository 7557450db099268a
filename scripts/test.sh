#!/usr/bin/env bash
# Installs TidalMQ with its test dependencies into .venv, runs ruff and mypy, then the default test suite.
# Extra arguments go to pytest (e.g. --run-slow for the crash loops and soak tests).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-system.sh  # Debian packages the suite needs (fuse3 for the power-cut harness, etcd-server for tests/controller)
bash scripts/setup.sh test
.venv/bin/ruff check src tests bench
.venv/bin/mypy  # src/tidalmq and tests, with the settings in pyproject.toml's [tool.mypy]
# Four workers, each test file in one of them (its module-scoped brokers started once); TIDALMQ_TEST_WORKERS
# changes the count, and `-n 0` among the arguments runs in this process alone.
exec .venv/bin/python -m pytest -n "${TIDALMQ_TEST_WORKERS:-4}" --dist loadfile "$@"

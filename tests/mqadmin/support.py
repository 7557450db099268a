"""How a test runs TidalMQ's ``mqadmin``: the console script pyproject.toml installs, with no NameServer but
the one the test names (tests elsewhere that operate a broker from the command line use it too)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

# the console script pyproject.toml installs next to the interpreter
MQADMIN = str(Path(sys.executable).with_name("mqadmin"))


def run_mqadmin(namesrv: str | None, *args: str, env: dict[str, str] | None = None,
                cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """``cwd``: where the command runs (consumerStatus writes its files there)."""
    cmd = [MQADMIN, *args] + (["-n", namesrv] if namesrv else [])
    full_env = {k: v for k, v in os.environ.items() if k != "NAMESRV_ADDR"}  # only what the test names
    full_env.update(env or {})
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60, env=full_env, cwd=cwd)

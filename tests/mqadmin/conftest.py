"""Fixtures of the mqadmin suite: the console script run against a real standalone."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.compat.conftest import agents  # noqa: F401 (the official-client agents fixture)
from tests.support import Standalone

# the console script pyproject.toml installs next to the interpreter
MQADMIN = str(Path(sys.executable).with_name("mqadmin"))

Run = Callable[..., subprocess.CompletedProcess[str]]


def run_mqadmin(namesrv: str | None, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    cmd = [MQADMIN, *args] + (["-n", namesrv] if namesrv else [])
    full_env = {k: v for k, v in os.environ.items() if k != "NAMESRV_ADDR"}  # only what the test names
    full_env.update(env or {})
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60, env=full_env)


@pytest.fixture
def mqadmin(shared_standalone: Standalone) -> Run:
    """``mqadmin(*args)``: the command against the module's broker; asserts nothing."""
    return lambda *args, **kw: run_mqadmin(shared_standalone.namesrv_addr, *args, **kw)

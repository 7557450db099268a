"""Fixtures of the mqadmin suite: the console script run against a real standalone."""

from __future__ import annotations

import subprocess
from collections.abc import Callable

import pytest

from tests.compat.conftest import agents  # noqa: F401 (the official-client agents fixture)
from tests.mqadmin.support import MQADMIN, run_mqadmin
from tests.support import Standalone

__all__ = ["MQADMIN", "Run", "agents", "mqadmin", "run_mqadmin"]

Run = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture
def mqadmin(shared_standalone: Standalone) -> Run:
    """``mqadmin(*args)``: the command against the module's broker; asserts nothing."""
    return lambda *args, **kw: run_mqadmin(shared_standalone.namesrv_addr, *args, **kw)

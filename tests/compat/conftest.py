"""Fixtures of the compat suite: client agents that clean up after themselves."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.compat.harness import ClientAgent, require_official_client

require_official_client()


class Agents:
    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.all: list[ClientAgent] = []

    def new(self, name: str) -> ClientAgent:
        a = ClientAgent(name, self.log_dir)
        self.all.append(a)
        return a

    def close_all(self) -> None:
        for a in self.all:
            result = a.close()
            if result is None:
                print(f"agent {a.name}: no clean exit (killed)")
            elif result.get("hung"):
                print(f"agent {a.name}: client shutdown hung for {result['hung']}")


@pytest.fixture
def agents(tmp_path: Path) -> Iterator[Agents]:
    ag = Agents(tmp_path)
    try:
        yield ag
    finally:
        ag.close_all()

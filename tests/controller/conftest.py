from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.controller.support import Etcd


@pytest.fixture
def etcd(tmp_path: Path) -> Iterator[Etcd]:
    server = Etcd(tmp_path / "etcd").start()
    try:
        yield server
    finally:
        server.stop()

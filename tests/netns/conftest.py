from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.netns.hosts import Hosts


@pytest.fixture
def hosts3() -> Iterator[Hosts]:
    """Three test hosts, removed afterwards whatever the test's outcome."""
    hosts = Hosts(3).setup()
    try:
        yield hosts
    finally:
        hosts.teardown()

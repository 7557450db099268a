"""A headless chromium driven through selenium (Debian's chromium and chromium-driver, installed by
scripts/setup-system.sh), and one standalone with the console's data for the module."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

from tests.console.data import Seeded, seed
from tests.console.support import new_browser
from tests.support import Standalone


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    driver = new_browser()
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture(scope="module")
def seeded(shared_standalone: Standalone) -> Seeded:
    return asyncio.run(asyncio.wait_for(seed(shared_standalone.namesrv_addr), 60))

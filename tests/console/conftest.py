"""A headless chromium driven through selenium (Debian's chromium and chromium-driver, installed by
scripts/setup-system.sh), and one standalone with the console's data for the module."""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Iterator
from typing import Any

import pytest

from tests.console.data import Seeded, seed
from tests.support import Standalone

PAGE_WAIT_S = 10.0


def _chromium() -> tuple[str, str] | None:
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    return (browser, driver) if browser and driver else None


def new_browser() -> Any:
    """A headless chromium; skips (saying why) where the machine has none after scripts/setup-system.sh."""
    found = _chromium()
    if found is None:
        pytest.skip("no chromium/chromedriver on this machine (scripts/setup-system.sh installs Debian's "
                    "chromium and chromium-driver as root): the console's browser tests did not run")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = found[0]
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                "--window-size=1400,1000", "--disable-extensions"):
        opts.add_argument(arg)
    # the driver given by path: selenium never goes looking for (or downloading) one
    driver = webdriver.Chrome(options=opts, service=Service(executable_path=found[1]))
    driver.set_page_load_timeout(PAGE_WAIT_S)
    return driver


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

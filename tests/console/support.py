"""What the console tests (and scripts/console_screenshots.py) share: the headless browser, a bounded
asyncio run, an admin call, a plain HTTP request."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import shutil
import subprocess
import sys
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Awaitable, Iterator
from typing import Any, TypeVar

import pytest

from tests.support import Standalone
from tidalmq.client import Admin

T = TypeVar("T")

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


def run(coro: Awaitable[T], timeout: float = 30.0) -> T:
    async def bounded() -> T:
        return await asyncio.wait_for(coro, timeout)

    return asyncio.run(bounded())


async def admin_call(s: Standalone, name: str, *args: Any) -> Any:
    async with Admin(s.namesrv_addr) as admin:
        return await getattr(admin, name)(*args)


def http(url: str, form: dict[str, str] | None = None, auth: tuple[str, str] | None = None) -> tuple[int, str]:
    data = urllib.parse.urlencode(form).encode() if form is not None else None
    req = urllib.request.Request(url, data=data)
    if auth is not None:
        req.add_header("Authorization", "Basic " + base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode())
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


@contextlib.contextmanager
def console_process(*args: str, timeout: float = 30.0) -> Iterator[str]:
    """``tidalmq console ARGS`` in a process of its own, once it printed its ready line; yields what it
    printed until then. Terminated on leaving."""
    proc = subprocess.Popen([sys.executable, "-m", "tidalmq.cli", "console", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        ready = threading.Event()
        lines: list[str] = []

        def reader() -> None:
            assert proc.stdout is not None
            for line in proc.stdout:
                lines.append(line)
                if "console ready" in line:
                    ready.set()

        threading.Thread(target=reader, daemon=True).start()
        assert ready.wait(timeout), "".join(lines)
        yield "".join(lines)
    finally:
        proc.terminate()
        proc.wait(10)

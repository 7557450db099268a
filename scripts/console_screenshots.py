"""Regenerates docs/console/*.png: a standalone on free ports in a temporary directory, the data of
tests/console/data.py, and each console page in headless chromium (Debian's chromium and chromium-driver).

    .venv/bin/python scripts/console_screenshots.py [--out docs/console]
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.console.data import seed  # noqa: E402
from tests.console.support import new_browser  # noqa: E402
from tests.support import Standalone  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "console")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="tidalmq-console-") as tmp, Standalone(Path(tmp) / "data") as s:
        data = asyncio.run(seed(s.namesrv_addr))
        pages = {
            "cluster": "/",
            "topics": "/topics",
            "groups": "/groups",
            "messages": f"/messages?topic={data.topic}&key=order-42",
            "messages-escaped": f"/messages?topic={data.topic}&key=xss",
            "dlq": f"/dlq?group={data.group}",
            "schedule": f"/schedule?topic={data.topic}&key=reminder",
        }
        browser = new_browser()
        try:
            for name, path in pages.items():
                browser.get(s.console_url + path)
                # the whole page, not the window (at most 2400 px high), through DevTools
                size = browser.execute_cdp_cmd("Page.getLayoutMetrics", {})["cssContentSize"]
                clip = {"x": 0, "y": 0, "width": 1400, "height": min(int(size["height"]), 2400), "scale": 1}
                shot = browser.execute_cdp_cmd("Page.captureScreenshot", {"format": "png", "clip": clip,
                                                                          "captureBeyondViewport": True})
                (args.out / f"{name}.png").write_bytes(base64.b64decode(shot["data"]))
                print(f"{args.out / name}.png  {path}")
        finally:
            browser.quit()
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The order-timeout demo pipeline, end to end, as a user runs it (one command, its own standalone)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.spark
ROOT = Path(__file__).resolve().parents[2]


def test_order_timeout_demo(tmp_path) -> None:
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
    r = subprocess.run([sys.executable, "examples/spark_order_timeout.py", "--orders", "60", "--timeout", "5",
                        "--master", "local[2]", "--out", str(tmp_path)], cwd=ROOT, env=env, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "RESULT: OK" in r.stdout
    assert (tmp_path / "lateness.png").stat().st_size > 1000
    assert list((tmp_path / "cancellations").glob("*.parquet"))

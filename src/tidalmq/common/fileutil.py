"""Durable small-file writes for config and metadata (topics.json, consumerOffset.json ...)."""

from __future__ import annotations

import os
from pathlib import Path


def atomic_write(path: str | Path, data: bytes) -> None:
    """Write ``data`` to ``path`` so that a crash leaves either the old or the new content.

    temp file + fsync + rename + fsync of the directory; a ``.bak`` of the previous content is
    kept as RocketMQ's ConfigManager does, for an operator to fall back on.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    if path.exists():
        bak = path.with_name(path.name + ".bak")
        try:
            os.replace(path, bak)
        except OSError:
            pass
    os.replace(tmp, path)
    dfd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


def read_with_backup(path: str | Path) -> bytes | None:
    """The file's content, or its ``.bak`` if the file is missing (crash between the renames)."""
    path = Path(path)
    for p in (path, path.with_name(path.name + ".bak")):
        try:
            return p.read_bytes()
        except FileNotFoundError:
            continue
    return None

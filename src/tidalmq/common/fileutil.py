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


class UnsafePathError(ValueError):
    """A path built from a name would leave the directory it must stay in."""


def path_under(root: str | Path, *parts: str) -> str:
    """``root/part/...``, refusing any part that is not one plain path component and any result that,
    symbolic links resolved, is not strictly inside ``root``.

    Every path the store makes from a name (a topic's ConsumeQueue directory, a queue's files, the
    directories a topic deletion removes) goes through here, so a name that slipped past the naming
    rules still cannot reach outside the store.
    """
    for part in parts:
        if (not isinstance(part, str) or part in ("", ".", "..") or "/" in part or "\\" in part
                or "\x00" in part or (os.altsep is not None and os.altsep in part)):
            raise UnsafePathError(f"refusing path component {part!r} under {root}")
    base = os.path.realpath(root)
    path = os.path.join(base, *parts)
    if os.path.commonpath([base, os.path.realpath(path)]) != base or not parts:
        raise UnsafePathError(f"refusing {path!r}: it resolves outside {base}")
    return path

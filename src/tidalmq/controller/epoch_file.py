"""The epoch file (RocketMQ 5's EpochFileCache, file ``epochFileCheckpoint``): which master term wrote
which part of this replica's CommitLog, as (epoch, start offset) entries, and the rule that finds where a
replica's CommitLog stops agreeing with the group's history (AutoSwitchHAClient's truncation point)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import NamedTuple

from tidalmq.common.fileutil import atomic_write

FILE_NAME = "epochFileCheckpoint"


class EpochEntry(NamedTuple):
    epoch: int
    start_offset: int


def parse_entries(text: str) -> list[EpochEntry]:
    """One ``epoch startOffset`` pair a line; a bad line or an order that goes backwards is refused."""
    out: list[EpochEntry] = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        fields = line.split()
        if len(fields) != 2 or not all(f.isdigit() for f in fields):
            raise ValueError(f"{FILE_NAME} line {n}: expected 'epoch startOffset', got {line!r}")
        entry = EpochEntry(int(fields[0]), int(fields[1]))
        if out and (entry.epoch <= out[-1].epoch or entry.start_offset < out[-1].start_offset):
            raise ValueError(f"{FILE_NAME} line {n}: {entry} does not follow {out[-1]}")
        out.append(entry)
    return out


def format_entries(entries: list[EpochEntry]) -> str:
    return "".join(f"{e.epoch} {e.start_offset}\n" for e in entries)


def consistent_offset(local: list[EpochEntry], chain: list[EpochEntry], local_max: int) -> int:
    """Where this replica's CommitLog (``local_max`` bytes, written in the terms ``local``) stops being a
    prefix of the group's history ``chain``: the end of the last term both know, in the shorter of the
    two. Everything at or after it is a divergent tail (a term's data only its old master has)."""
    if not local:
        # No history (a new replica, or one from before controller mode): nothing to judge it by.
        return local_max
    starts = {e.epoch: i for i, e in enumerate(chain)}
    for i in range(len(local) - 1, -1, -1):
        e = local[i]
        j = starts.get(e.epoch)
        if e.start_offset > local_max or j is None or chain[j].start_offset != e.start_offset:
            continue
        local_end = min(local[i + 1].start_offset, local_max) if i + 1 < len(local) else local_max
        chain_end = chain[j + 1].start_offset if j + 1 < len(chain) else local_end
        return min(local_end, chain_end)
    return 0


class EpochFile:
    """This replica's entries, persisted at ``<storePathRootDir>/epochFileCheckpoint``."""

    def __init__(self, store_root: str | Path) -> None:
        self.path = Path(store_root) / FILE_NAME
        self.entries: list[EpochEntry] = []

    def load(self) -> None:
        try:
            self.entries = parse_entries(self.path.read_text())
        except FileNotFoundError:
            self.entries = []

    def replace(self, entries: list[EpochEntry]) -> None:
        os.makedirs(self.path.parent, exist_ok=True)
        atomic_write(self.path, format_entries(entries).encode())
        self.entries = list(entries)

    @property
    def last_epoch(self) -> int:
        return self.entries[-1].epoch if self.entries else 0

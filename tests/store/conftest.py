"""Helpers for the store tests: tiny file sizes, a controllable clock, a fake IndexService."""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from tidalmq.common.record import encode_record
from tidalmq.store.config import MessageStoreConfig
from tidalmq.store.message_store import DefaultMessageStore, PutRequest


class FakeClock:
    def __init__(self, now: int = 1_700_000_000_000) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


@dataclass
class FakeIndex:
    """Records what the store sends; answers queries like RocketMQ's IndexService (by exact key)."""

    entries: list[tuple[str, int, int]] = field(default_factory=list)  # (topic#key, offset, ts)
    loaded: list[bool] = field(default_factory=list)
    expired_calls: list[int] = field(default_factory=list)
    flushed: int = 0
    duplicate: bool = False  # return every offset twice (as a re-dispatched index would)

    def load(self, last_exit_ok: bool) -> bool:
        self.loaded.append(last_exit_ok)
        return True

    @property
    def max_index_commit_log_offset(self) -> int:
        return max((o for _, o, _ in self.entries), default=0)

    def build_index_batch(self, items: list[tuple[str, list[str] | None, str | None, int, int]]) -> None:
        for topic, keys, uniq_key, commit_log_offset, store_timestamp in items:
            for k in ([uniq_key] if uniq_key else []) + list(keys or []):
                self.entries.append((f"{topic}#{k}", commit_log_offset, store_timestamp))

    def build_index_columns(self, topics, keyss, uniqs, offsets, timestamps) -> None:  # noqa: ANN001
        self.build_index_batch(list(zip(topics, keyss, uniqs, offsets.tolist(), timestamps.tolist(), strict=True)))

    def query_offsets(self, topic: str, key: str, max_num: int, begin_ts: int, end_ts: int) -> list[int]:
        out = [o for k, o, ts in self.entries if k == f"{topic}#{key}" and begin_ts <= ts <= end_ts]
        if self.duplicate:
            out = [o for o in out for _ in (0, 1)]
        return out[:max_num]

    def flush(self) -> None:
        self.flushed += 1

    def delete_expired(self, min_commit_log_offset: int) -> int:
        self.expired_calls.append(min_commit_log_offset)
        return 0

    def destroy(self) -> None:
        self.entries.clear()

    def close(self) -> None:
        pass


def small_config(root: str, **kw: object) -> MessageStoreConfig:
    cfg = MessageStoreConfig(
        store_path_root_dir=root,
        mapped_file_size_commit_log=16 * 1024,
        mapped_file_size_consume_queue=20 * 64,
        flush_interval_commit_log=20,
        flush_interval_consume_queue=50,
        delete_commit_log_files_interval=0,
        delete_when="",
    )
    for k, v in kw.items():
        setattr(cfg, k, v)
    return cfg


def rec(topic: str, queue_id: int = 0, body: bytes = b"hello", tags: str | None = None,
        keys: str | None = None, uniq: str | None = None, sysflag: int = 0,
        props: dict[str, str] | None = None) -> bytearray:
    p: dict[str, str] = dict(props or {})
    if tags:
        p["TAGS"] = tags
    if keys:
        p["KEYS"] = keys
    if uniq:
        p["UNIQ_KEY"] = uniq
    return encode_record(topic=topic, queue_id=queue_id, body=body, properties=p, sysflag=sysflag,
                         born_timestamp=1, born_port=1234, store_port=10911)


def put_one(store: DefaultMessageStore, topic: str, queue_id: int = 0, **kw: Any):  # noqa: ANN201
    return store.put_messages([PutRequest(topic, queue_id, [rec(topic, queue_id, **kw)])])[0]


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def make_store(tmp_path, clock) -> Iterator:  # noqa: ANN001
    stores: list[DefaultMessageStore] = []

    def factory(start: bool = True, index: FakeIndex | None = None, root: str | None = None,
                **kw: object) -> DefaultMessageStore:
        cfg = small_config(root or str(tmp_path / "store"), **kw)
        s = DefaultMessageStore(cfg, clock=clock, index_service=index or FakeIndex())
        assert s.load()
        if start:
            s.start()
        stores.append(s)
        return s

    yield factory
    for s in stores:
        if not s._shutdown:
            try:
                s.shutdown()
            except Exception:
                pass


def after_power_loss(store: DefaultMessageStore) -> None:
    """Make a crashed store's next load see a crash of an earlier boot, as a power loss leaves it: the
    page cache lost, so recovery trusts nothing written since the checkpoint's timestamps."""
    with open(store.config.abort_path, "wb") as f:
        f.write(b"another-boot")


def set_dispatched(store: DefaultMessageStore, offset: int) -> None:
    """A crashed store's checkpoint says the reput's last finished round ended at ``offset`` (the round
    after it was under way when the process died)."""
    with open(store.config.checkpoint_path, "r+b") as f:
        f.seek(40)
        f.write(struct.pack(">qq", offset, 0))


def crash(store: DefaultMessageStore) -> None:
    """Leave the store as a killed process would: no final flush, checkpoint or abort-file removal.
    (Data stored through the mappings survives, as it does a SIGKILL.)"""
    for t in (store.clean_service, store.flush_cq_service, store.flush_service):
        if t is not None:
            t._stopped.set()
            t.wakeup()
    if store.flush_service is not None:
        # GroupCommitService waits on its condition
        cond = getattr(store.flush_service, "_cond", None)
        if cond is not None:
            with cond:
                cond.notify_all()
    store.reput._stopped.set()
    store.reput.wakeup()
    services: tuple[Any, ...] = (store.clean_service, store.flush_cq_service, store.flush_service, store.reput)
    for t in services:
        if t is not None and t.is_alive():
            t.join(5)
    store._shutdown = True
    store._close()
    if not os.path.exists(store.config.abort_path):
        open(store.config.abort_path, "wb").close()

"""consumerOffset.json written from two threads at once: the periodic flush runs on an executor thread, and
the broker's stop persists again without waiting for it (a cancelled task does not stop its thread)."""

from __future__ import annotations

import threading
from pathlib import Path

from tidalmq.broker.offset.consumer_offset import ConsumerOffsetManager
from tidalmq.common import fastjson


def test_concurrent_persists_never_fail_and_the_last_table_is_written(tmp_path: Path) -> None:
    m = ConsumerOffsetManager(tmp_path / "config" / "consumerOffset.json")
    errors: list[BaseException] = []
    stop = threading.Event()

    def flusher() -> None:
        try:
            while not stop.is_set():
                m.persist(force=True)
        except BaseException as e:  # what the broker's stop would have raised
            errors.append(e)

    threads = [threading.Thread(target=flusher) for _ in range(3)]
    for t in threads:
        t.start()
    try:
        for offset in range(300):
            m.commit("G", "T", offset % 4, offset)
            m.persist(force=True)
    finally:
        stop.set()
        for t in threads:
            t.join(30)
    assert not errors, errors[0]
    m.persist(force=True)
    table = fastjson.loads(m.path.read_bytes())["offsetTable"]  # RocketMQ's form: queue ids unquoted
    assert {int(q): o for q, o in table["T@G"].items()} == {0: 296, 1: 297, 2: 298, 3: 299}
    reloaded = ConsumerOffsetManager(m.path)
    reloaded.load()
    assert reloaded.table == m.table

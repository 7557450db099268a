"""Broker CPU of the de-duplication window (``duplicationEnable``, broker/dedup.py) per message: what
``screen`` + ``settle`` add to a send, for single sends and for batches of 256, in one process (no
sockets, no store).

    .venv/bin/python bench/dedup_cost.py
"""

import tempfile
import time

from tidalmq.broker.dedup import DuplicationWindow
from tidalmq.cli import _settle_gc
from tidalmq.client import codec
from tidalmq.client.message import Message
from tidalmq.common.record import encode_record
from tidalmq.common.record_batch import encode_batch_records
from tidalmq.remoting.command import RemotingCommand
from tidalmq.store.results import AppendResult, PutRequest, PutStatus


class EmptyStore:
    """What the window reads of the store: an empty CommitLog."""

    @staticmethod
    def commit_log_range() -> tuple[int, int]:
        return 0, 0

    @staticmethod
    def offset_msg_id(p: int) -> str:
        return f"{p:032X}"


w = DuplicationWindow(EmptyStore(),  # type: ignore[arg-type]
                       tempfile.mkdtemp(), window_seconds=3600, window_size=200_000, snapshot_interval_s=1e9)
w.ensure_loaded()
req = RemotingCommand(code=310)
N = 50_000
recs = [encode_record(topic="T", queue_id=0, body=b"x" * 100, properties=f"TAGS\x01t\x02KEYS\x01k{i}\x02UNIQ_KEY\x01{i:032X}\x02",
        flag=0, sysflag=0, born_timestamp=0, born_host=b"\x7f\0\0\1", born_port=1, store_host=b"\x7f\0\0\1", store_port=2) for i in range(N)]
# The collector as the broker sets it after start-up (cli._settle_gc): with the default thresholds,
# collections over the window's entries would land in whichever loop allocates more, and the
# batch figure below (a difference of two loops) would measure them instead of the window.
_settle_gc()
t = time.perf_counter()
for i, r in enumerate(recs):
    put = w.screen(req, PutRequest("T", 0, [r]), lambda _: None)
    w.settle(put, AppendResult(PutStatus.PUT_OK, i * 200, 200, "", i, int(time.time() * 1000)))
dt = time.perf_counter() - t
print(f"single sends: {dt / N * 1e6:.1f} us/message (screen + settle)")
B = 256
bodies = []
for lo in range(N, N + 40 * B, B):
    msgs = [Message("T", b"x" * 100, tags="t", keys=f"k{i}", properties={"UNIQ_KEY": f"{i:032X}"}) for i in range(lo, lo + B)]
    bodies.append(codec.encode_batch(msgs))
_settle_gc()
t = time.perf_counter()
for j, body in enumerate(bodies):
    rb = encode_batch_records(body, topic="T", queue_id=0, sysflag=0, born_timestamp=0, born_host=b"\x7f\0\0\1", born_port=1,
                              store_host=b"\x7f\0\0\1", store_port=2)
    put = w.screen(req, PutRequest("T", 0, rb), lambda _: None)
    w.settle(put, AppendResult(PutStatus.PUT_OK, 10**9 + j * 60000, 60000, "", j * B, int(time.time() * 1000), B))
dt2 = time.perf_counter() - t
t = time.perf_counter()
for body in bodies:
    encode_batch_records(body, topic="T", queue_id=0, sysflag=0, born_timestamp=0, born_host=b"\x7f\0\0\1", born_port=1,
                         store_host=b"\x7f\0\0\1", store_port=2)
dt3 = time.perf_counter() - t
print(f"batches of {B}: {(dt2 - dt3) / (40 * B) * 1e6:.2f} us/message (screen + settle, encode subtracted)")

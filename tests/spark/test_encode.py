"""The sink's column-at-a-time encoder writes what the client's batch encoder writes (``codec.encode_batch``)
for the same rows. In the Spark suite (``--run-spark``), where pyarrow is installed."""

from __future__ import annotations

import pytest

from tidalmq.client.codec import decode_batch, encode_batch
from tidalmq.client.message import Message

pytestmark = pytest.mark.spark


def _rows() -> tuple[list[bytes], list[str | None], list[object], list[list[tuple[str, str | None]] | None]]:
    bodies = [b"a", "é".encode() * 300, b"\x00\x01", b"z" * 70]
    tags = ["t1", None, "", "t4"]
    keys: list[object] = [["k1", None, "k2"], None, [], ["", "only"]]
    props: list[list[tuple[str, str | None]] | None] = [[("p", "v"), ("skip", None)], None, [], [("x", "é")]]
    return bodies, tags, keys, props


def test_encoded_batch_equals_the_clients_encoding() -> None:
    import numpy as np
    import pyarrow as pa

    from tidalmq.spark import encode

    bodies, tags, keys, props = _rows()
    ids = encode.hex_ids("ABCDEF0123456789ABCDEF01", np.arange(0xFFFFFFFE, 0xFFFFFFFE + 4, dtype=np.uint64), 8)
    enc = encode.encode_messages(pa.array(bodies, pa.binary()), ids, pa.array(tags, pa.string()),
                                 encode.keys_text(pa.array(keys, pa.list_(pa.string()))),
                                 encode.properties_text(pa.array(props, pa.map_(pa.string(), pa.string()))))
    uniq = ["ABCDEF0123456789ABCDEF01FFFFFFFE", "ABCDEF0123456789ABCDEF01FFFFFFFF",
            "ABCDEF0123456789ABCDEF0100000000", "ABCDEF0123456789ABCDEF0100000001"]
    expected = []
    for b, t, k, p, u in zip(bodies, tags, keys, props, uniq, strict=True):
        m = Message("T", b, tags=t or None, keys=[x for x in k if x] or None if isinstance(k, list) else None,
                    properties={pk: pv for pk, pv in (p or []) if pv is not None} | {"UNIQ_KEY": u})
        expected.append(m)
    chunks = list(encode.chunks(enc, ids, size=3))
    assert [c[1] for c in chunks] == [",".join(uniq[:3]), uniq[3]]
    got = decode_batch(b"".join(c[0] for c in chunks))
    assert got == decode_batch(encode_batch(expected))
    assert [g[2]["UNIQ_KEY"] for g in got] == uniq


def test_chunks_stay_under_the_byte_budget_with_at_least_one_message() -> None:
    import numpy as np
    import pyarrow as pa

    from tidalmq.spark import encode

    ids = encode.hex_ids("P" * 28, np.arange(5, dtype=np.uint64), 4)
    enc = encode.encode_messages(pa.array([b"x" * 400] * 5, pa.binary()), ids)
    sizes = [len(body) for body, _ in encode.chunks(enc, ids, size=100, max_bytes=1000)]
    assert sum(sizes) == sum(len(v) for v in enc.to_pylist())
    assert all(s <= 1000 for s in sizes) and len(sizes) == 3  # two 400-byte bodies (+ headers) a chunk


def test_properties_over_the_short_length_are_refused() -> None:
    import numpy as np
    import pyarrow as pa

    from tidalmq.spark import encode

    ids = encode.hex_ids("P" * 28, np.arange(2, dtype=np.uint64), 4)
    with pytest.raises(ValueError, match="row 1: its properties are"):
        encode.encode_messages(pa.array([b"a", b"b"], pa.binary()), ids, keys=pa.array(["k", "k" * 40000]))


def test_partition_writer_splits_a_batch_by_its_topic_column(standalone) -> None:  # noqa: ANN001
    """The partition writer outside Spark (no task context: random UNIQ_KEYs) over an Arrow batch with a
    topic column of two topics and nulls (the option 'topic'): each topic gets its rows, each row once."""
    import asyncio
    import time

    import pyarrow as pa

    from tidalmq.client.sync import Admin
    from tidalmq.spark import sink
    from tidalmq.spark.options import parse_write_options

    ns = standalone.namesrv_addr
    with Admin(ns) as admin:
        for t in ("EncA", "EncB"):
            admin.create_topic(t, 2)
        opts = parse_write_options({"nameserver": ns, "topic": "EncB"}, streaming=False)
        n = 1000
        rb = pa.record_batch([pa.array([f"m{i}" for i in range(n)]),
                              pa.array(["EncA" if i % 3 == 0 else None for i in range(n)])], names=["body", "topic"])
        done = asyncio.run(sink._send_all(opts, {"body": "body", "topic": "topic"}, iter([rb]), None))
        assert done.rows == n
        want = {"EncA": len(range(0, n, 3)), "EncB": n - len(range(0, n, 3))}
        deadline = time.monotonic() + 20
        got: dict[str, int] = {}
        while time.monotonic() < deadline:  # the ConsumeQueue follows the CommitLog's acknowledgement
            got = {t: sum(q.max_offset for q in admin.topic_status(t)) for t in want}
            if got == want:
                break
            time.sleep(0.1)
        assert got == want

"""IndexFile / IndexService: RocketMQ's key index, on-disk layout and query semantics."""

from __future__ import annotations

import os
import random
import re
import struct
import threading
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tidalmq.common.taghash import java_string_hash
from tidalmq.store import index_file
from tidalmq.store.index_file import (
    IndexFile,
    index_file_size,
    index_hashes_with_prefix,
    index_key_hash,
    index_key_hashes,
    prefix_hash,
    string_hashes,
)
from tidalmq.store.index_service import IndexService

T0 = 1_700_000_000_000  # a store timestamp (ms), multiple of 1000
SCALAR = 10**9  # vector_threshold values forcing one build path or the other
VECTOR = 0


def java_abs_hash(s: str) -> int:
    """Independent model of RocketMQ's indexKeyHashMethod: Math.abs(hashCode()), MIN_VALUE -> 0."""
    h = 0
    for ch in s.encode("utf-16-be").hex(" ", 2).split():
        h = (31 * h + int(ch, 16)) % 2**32
    if h >= 2**31:
        h -= 2**32
    return 0 if h == -(2**31) else abs(h)


def make(tmp_path, slots=64, num=32, threshold=None, sub="index") -> IndexService:
    s = IndexService(str(tmp_path / sub), max_hash_slot_num=slots, max_index_num=num)
    if threshold is not None:
        s.vector_threshold = threshold
    assert s.load(True)
    return s


# ---------------------------------------------------------------------------- hashing


def test_key_hash_matches_java_including_min_value():
    assert java_string_hash("polygenelubricants") == -(2**31)
    assert index_key_hash("polygenelubricants") == 0
    assert index_key_hash("Aa") == index_key_hash("BB") == 2112
    keys = [
        "polygenelubricants",
        "TopicTest#KEY-1",
        "T#é€",
        "T#😀x",
        "a",
        "TopicTest#7F00000100002A9F0000000000000000",
    ]
    keys += [f"Topic{i}#{'k' * (i % 70)}{i}" for i in range(500)]
    expected = [java_abs_hash(k) for k in keys]
    assert [index_key_hash(k) for k in keys] == expected
    assert index_key_hashes(keys).tolist() == expected


UNIQ = [f"7F00000100002A9F{i:016X}" for i in range(40)]  # 32 ASCII chars, like RocketMQ's unique keys

# (name, prefix, keys): each row goes through string_hashes' matrix path (ASCII, one length) or its
# prefix-sum path (anything else), and through index_hashes_with_prefix with a shared prefix
VECTOR_HASH_CASES = [
    ("ascii one length", "TopicTest#", UNIQ),
    ("ascii one length, empty prefix", "", UNIQ),
    ("ascii one char", "T#", list("abcdefghij")),
    ("ascii mixed lengths", "TopicTest#", [f"order-{i}" for i in range(0, 5000, 37)]),
    ("ascii mixed lengths, empty prefix", "", ["a", "bb", "ccc", "Aa", "BB", "x" * 70, "polygenelubricants"]),
    ("min value after the prefix", "polygene", ["lubricants", "lubricants", "x"]),
    ("min value, empty prefix", "", ["polygenelubricants"] * 3),
    ("empty keys", "TopicTest#", ["", "", ""]),
    ("empty keys among others", "T#", ["", "k", "", "key", ""]),
    ("empty keys, empty prefix", "", ["", ""]),
    ("no keys", "T#", []),
    ("NUL and DEL chars", "T#", ["\x00", "a\x00", "\x00a", "\x7f\x7f"]),
    ("latin-1", "T#", ["é", "ü-ß", "ÿÿÿ"]),
    ("BMP, one length", "T#", ["订单一", "订单二", "€€€"]),
    ("BMP mixed lengths", "TopicTest#", ["订单-1", "é€", "a", "\uffff", "\ud7ff中"]),
    ("non-ASCII prefix", "主题#", ["k1", "k22", "k333"]),
    ("non-BMP keys", "T#", ["😀", "😀x", "x😀", "😀😀😀", "𝄞"]),
    ("non-BMP mixed with ASCII and BMP", "TopicTest#", ["a", "😀", "é", "", "order-7", "x😀€y"]),
    ("non-BMP prefix", "😀#", ["k", "😀", "é"]),
    ("non-BMP prefix, ASCII keys of one length", "😀#", UNIQ[:5]),
    ("long ASCII keys of one length", "T#", [c * 300 for c in "abcdef"]),
    ("ASCII keys, many lengths", "T#", [f"{i}-" + "z" * (i % 97) for i in range(500)]),
]


@pytest.mark.parametrize(
    ("prefix", "keys"), [c[1:] for c in VECTOR_HASH_CASES], ids=[c[0] for c in VECTOR_HASH_CASES]
)
def test_vectorised_hashes_match_scalar(prefix, keys):
    expected = [java_abs_hash(prefix + k) for k in keys]
    assert [index_key_hash(prefix + k) for k in keys] == expected
    assert index_key_hashes(keys, prefix).tolist() == expected
    assert index_key_hashes([prefix + k for k in keys]).tolist() == expected
    # per-key prefixes (rounds with several topics) give the same as one shared prefix
    h, lengths = string_hashes(keys)
    per_key = np.full(len(keys), prefix_hash(prefix), dtype=np.uint32)
    assert index_hashes_with_prefix(per_key, h, lengths).tolist() == expected


@pytest.mark.parametrize(
    ("prefix", "keys"), [c[1:] for c in VECTOR_HASH_CASES], ids=[c[0] for c in VECTOR_HASH_CASES]
)
def test_string_hashes_are_java_hash_codes_and_utf16_lengths(prefix, keys):
    h, lengths = string_hashes(keys)
    assert h.dtype == np.uint32
    assert h.tolist() == [java_string_hash(k) & 0xFFFFFFFF for k in keys]
    units = [len(k.encode("utf-16-be")) // 2 for k in keys]
    if isinstance(lengths, int):  # the matrix path: every key has that length
        assert units == [lengths] * len(keys)
    else:
        assert lengths.tolist() == units


def test_vectorised_hashes_with_per_key_prefixes():
    topics = ["TopicA", "TopicB", "主题", "😀", ""]
    keys = [f"order-{i}" for i in range(50)] + UNIQ[:10] + ["", "é", "😀"]
    pref = [topics[i % len(topics)] + "#" for i in range(len(keys))]
    expected = [java_abs_hash(p + k) for p, k in zip(pref, keys, strict=True)]
    h, lengths = string_hashes(keys)
    per_key = np.array([prefix_hash(p) for p in pref], dtype=np.uint32)
    assert index_hashes_with_prefix(per_key, h, lengths).tolist() == expected
    h, lengths = string_hashes(UNIQ)  # one length: lengths is an int
    per_key = np.array([prefix_hash(topics[i % 5] + "#") for i in range(len(UNIQ))], dtype=np.uint32)
    assert index_hashes_with_prefix(per_key, h, lengths).tolist() == [
        java_abs_hash(topics[i % 5] + "#" + k) for i, k in enumerate(UNIQ)
    ]


def test_vectorised_hashes_in_chunks_and_without_matrix(monkeypatch):
    keys = [f"order-{i}" for i in range(300)] + ["😀" * 5, "é" * 9] + UNIQ
    wide = ["q" * 40 + str(i % 10) for i in range(30)]
    expected = [java_abs_hash("T#" + k) for k in keys]
    expected_wide = [java_abs_hash("T#" + k) for k in wide]
    monkeypatch.setattr(index_file, "_PREFIX_SUM_MAX_UNITS", 64)  # split into many passes
    monkeypatch.setattr(index_file, "_MATMUL_MAX_WIDTH", 8)  # one-length keys through prefix sums
    assert index_key_hashes(keys, "T#").tolist() == expected
    assert index_key_hashes(wide, "T#").tolist() == expected_wide
    # lengths beyond the cached power table
    h, lengths = string_hashes(["a" * 5000, "b"])
    assert index_hashes_with_prefix(prefix_hash("T#"), h, lengths).tolist() == [
        java_abs_hash("T#" + "a" * 5000),
        java_abs_hash("T#b"),
    ]


# ---------------------------------------------------------------------------- layout


def test_on_disk_layout_matches_rocketmq(tmp_path):
    slots, num = 7, 6
    s = make(tmp_path, slots, num, threshold=SCALAR)
    k1, k2 = "T#k1", "T#k2"
    h1, h2 = java_abs_hash(k1), java_abs_hash(k2)
    # a third key that lands in k1's slot, to see the chain
    k3 = next(
        f"T#c{i}" for i in range(1000) if java_abs_hash(f"T#c{i}") % slots == h1 % slots and f"T#c{i}" != k1
    )
    h3 = java_abs_hash(k3)
    s.build_index("T", ["k1"], None, 100, T0 + 123)
    s.build_index("T", ["k2"], None, 200, T0 + 2_600)
    s.build_index("T", [k3[2:]], None, 300, T0 + 5_999)
    path = s.file_paths[0]
    assert re.fullmatch(r"\d{17}", os.path.basename(path))
    raw = open(path, "rb").read()
    assert len(raw) == 40 + slots * 4 + num * 20 == index_file_size(slots, num)

    # header: beginTs, endTs, beginPhy, endPhy, hashSlotCount, indexCount (next entry number)
    hdr = struct.unpack_from(">qqqqii", raw, 0)
    n_slots_used = len({h1 % slots, h2 % slots})
    assert hdr == (T0 + 123, T0 + 5_999, 100, 300, n_slots_used, 4)

    def slot(i):
        return struct.unpack_from(">i", raw, 40 + 4 * i)[0]

    def entry(i):
        return struct.unpack_from(">iqii", raw, 40 + 4 * slots + 20 * i)

    assert raw[40 + 4 * slots : 40 + 4 * slots + 20] == bytes(20)  # entry 0 is never used
    assert entry(1) == (h1, 100, 0, 0)
    assert entry(2) == (h2, 200, 2, 0 if h2 % slots != h1 % slots else 1)  # (2600-123)//1000 = 2 s
    assert entry(3) == (h3, 300, 5, 1)  # chained onto entry 1
    assert slot(h1 % slots) == 3
    if h2 % slots != h1 % slots:
        assert slot(h2 % slots) == 2
    untouched = set(range(slots)) - {h1 % slots, h2 % slots}
    assert all(slot(i) == 0 for i in untouched)
    assert raw[40 + 4 * slots + 20 * 4 :] == bytes(20 * (num - 4))
    s.close()


def test_min_value_hash_goes_to_slot_zero(tmp_path):
    f = IndexFile(str(tmp_path / "00000000000000001"), 5, 4, create=True)
    assert f.put_key("polygenelubricants", 42, T0)
    f.close()
    raw = (tmp_path / "00000000000000001").read_bytes()
    assert struct.unpack_from(">i", raw, 40)[0] == 1
    assert struct.unpack_from(">iqii", raw, 40 + 20 + 20) == (0, 42, 0, 0)


def test_new_file_reserves_blocks_ahead_of_its_entries(tmp_path):
    s = IndexService(str(tmp_path / "index"))  # RocketMQ defaults: 5M slots, 20M entries
    s.load(True)
    s.build_index_batch([("T", [f"k{i}"], None, i, T0 + i) for i in range(100)])
    (path,) = s.file_paths
    st_ = os.stat(path)
    assert st_.st_size == 40 + 5_000_000 * 4 + 20_000_000 * 20 == 420_000_040
    # Header, slots and the entries ahead of the writes are allocated (fallocate), so a store through
    # the mapping never lands in a hole (a SIGBUS on a full disk); the rest is reserved as it fills.
    slots_end = 40 + 5_000_000 * 4
    assert slots_end + 100 * 20 <= st_.st_blocks * 512 < slots_end + 16 * 1024 * 1024
    assert s.query_offsets("T", "k7", 10, 0, 2**62) == [7]
    s.destroy()
    assert not os.path.exists(path)


# ---------------------------------------------------------------------------- queries


@pytest.mark.parametrize("threshold", [SCALAR, VECTOR])
def test_round_trip_keys_and_uniq_keys(tmp_path, threshold):
    s = make(tmp_path, 64, 1000, threshold)
    s.build_index_batch(
        [
            ("TopicA", ["order-1", "user-7"], "UNIQ1", 0, T0),
            ("TopicA", ["order-2", "", "user-7"], "UNIQ2", 100, T0 + 1000),
            ("TopicB", ["order-1"], None, 200, T0 + 2000),
            ("TopicA", "order-3 user-7", None, 300, T0 + 3000),  # RocketMQ KEYS string form
            ("TopicA", [], None, 400, T0 + 4000),  # nothing to index
        ]
    )
    q = s.query_offsets
    assert q("TopicA", "order-1", 10, 0, 2**62) == [0]
    assert q("TopicA", "user-7", 10, 0, 2**62) == [300, 100, 0]  # newest first
    assert q("TopicA", "UNIQ2", 10, 0, 2**62) == [100]
    assert q("TopicB", "order-1", 10, 0, 2**62) == [200]
    assert q("TopicB", "UNIQ1", 10, 0, 2**62) == []
    assert q("TopicA", "order-3", 10, 0, 2**62) == [300]
    assert q("TopicA", "", 10, 0, 2**62) == []
    assert q("TopicA", "nope", 10, 0, 2**62) == []
    assert s.max_index_commit_log_offset == 300
    assert s.end_timestamp == T0 + 3000
    s.close()


@pytest.mark.parametrize("threshold", [SCALAR, VECTOR])
def test_slot_collisions_and_equal_hash_keys(tmp_path, threshold):
    s = make(tmp_path, 1, 500, threshold)  # a single slot: every key chains through it
    s.build_index_batch([("T", [f"k{i}", f"common{i % 3}"], None, i * 10, T0 + i) for i in range(100)])
    for i in (0, 37, 99):
        assert s.query_offsets("T", f"k{i}", 10, 0, 2**62) == [i * 10]
    assert s.query_offsets("T", "common1", 1000, 0, 2**62) == [
        i * 10 for i in range(99, -1, -1) if i % 3 == 1
    ]
    # "Aa" and "BB" have the same Java hashCode: the index cannot tell them apart (RocketMQ neither)
    s.build_index("T", ["Aa"], None, 5000, T0 + 500)
    s.build_index("T", ["BB"], None, 5010, T0 + 500)
    assert s.query_offsets("T", "Aa", 10, 0, 2**62) == [5010, 5000]
    s.close()


@pytest.mark.parametrize("threshold", [SCALAR, VECTOR])
def test_time_range_filtering(tmp_path, threshold):
    s = make(tmp_path, 16, 100, threshold)
    s.build_index_batch([("T", ["k"], None, i * 100, T0 + i * 1000) for i in range(10)])
    q = s.query_offsets
    assert q("T", "k", 100, T0 + 3000, T0 + 6000) == [600, 500, 400, 300]
    assert q("T", "k", 100, T0 + 3001, T0 + 5999) == [500, 400]
    assert q("T", "k", 100, T0 + 9000, T0 + 10**6) == [900]
    assert q("T", "k", 100, 0, T0 - 1) == []
    assert q("T", "k", 100, T0 + 10_000, T0 + 20_000) == []
    assert q("T", "k", 100, T0 + 6000, T0 + 3000) == []
    # timestamps are kept in whole seconds after the file's first entry: 1500 ms reads back as 1000
    s.build_index("T", ["sec"], None, 2000, T0 + 9_000 + 1_500)
    assert q("T", "sec", 10, T0 + 10_000, T0 + 10_000) == [2000]
    assert q("T", "sec", 10, T0 + 10_001, T0 + 20_000) == []
    s.close()


def test_max_num(tmp_path):
    s = make(tmp_path, 16, 30)  # 29 entries per file: results span files
    s.build_index_batch([("T", ["k"], None, i, T0 + i * 1000) for i in range(100)])
    assert len(s.file_paths) == 4
    assert s.query_offsets("T", "k", 5, 0, 2**62) == [99, 98, 97, 96, 95]
    assert s.query_offsets("T", "k", 40, 0, 2**62) == list(range(99, 59, -1))
    assert s.query_offsets("T", "k", 1000, 0, 2**62) == list(range(99, -1, -1))
    assert s.query_offsets("T", "k", 0, 0, 2**62) == []
    s.close()


def test_duplicates_are_removed_and_old_offsets_skipped(tmp_path):
    s = make(tmp_path, 16, 100)
    s.build_index("T", ["k"], "U", 100, T0)
    s.build_index("T", ["k"], "U", 200, T0 + 1000)
    s.build_index("T", ["k"], "U", 100, T0)  # below the newest indexed offset: skipped (RocketMQ)
    s.build_index("T", ["k", "k"], "k", 200, T0 + 1000)  # at it: indexed again, de-duplicated on query
    assert s.query_offsets("T", "k", 10, 0, 2**62) == [200, 100]
    assert s.query_offsets("T", "U", 10, 0, 2**62) == [200, 100]
    assert s.query_offsets("T", "k", 1, 0, 2**62) == [200]
    s.close()


# ---------------------------------------------------------------------------- files


@pytest.mark.parametrize("threshold", [SCALAR, VECTOR])
def test_roll_over_to_new_files(tmp_path, threshold):
    s = make(tmp_path, 8, 5, threshold)  # 4 entries per file
    s.build_index_batch([("T", ["a", "b"], f"u{i}", i * 10, T0 + i * 1000) for i in range(5)])  # 15 entries
    paths = s.file_paths
    assert len(paths) == 4
    names = [os.path.basename(p) for p in paths]
    assert names == sorted(names) and len(set(names)) == 4
    assert all(re.fullmatch(r"\d{17}", n) for n in names)
    headers = [struct.unpack_from(">qqqqii", open(p, "rb").read(40)) for p in paths]
    # entry offsets per file (uniq key first, then keys): 0 0 0 10 | 10 10 20 20 | 20 30 30 30 | 40 40 40
    assert headers[0] == (T0, T0 + 1000, 0, 10, headers[0][4], 5)
    assert headers[1][:4] == (T0 + 1000, T0 + 2000, 10, 20) and headers[1][5] == 5
    assert headers[2][:4] == (T0 + 2000, T0 + 3000, 20, 30) and headers[2][5] == 5
    assert headers[3][:4] == (T0 + 4000, T0 + 4000, 40, 40) and headers[3][5] == 4
    assert s.query_offsets("T", "a", 100, 0, 2**62) == [40, 30, 20, 10, 0]
    assert s.query_offsets("T", "u2", 100, 0, 2**62) == [20]
    assert s.query_offsets("T", "b", 100, T0 + 1000, T0 + 3000) == [30, 20, 10]
    s.build_index("T", ["a"], None, 50, T0 + 5000)  # fills the last file
    assert len(s.file_paths) == 4
    s.build_index("T", ["a"], None, 60, T0 + 6000)
    assert len(s.file_paths) == 5
    assert s.query_offsets("T", "a", 100, 0, 2**62) == [60, 50, 40, 30, 20, 10, 0]
    s.close()


def test_reopen_after_close(tmp_path):
    s = make(tmp_path, 8, 5)
    items = [("T", [f"k{i % 4}"], f"u{i}", i * 100, T0 + i * 1000) for i in range(9)]  # 18 entries
    s.build_index_batch(items)
    before = {k: s.query_offsets("T", k, 100, 0, 2**62) for k in ["k0", "k1", "k3", "u5", "u8"]}
    assert before["k0"] == [800, 400, 0] and before["u5"] == [500]
    paths = s.file_paths
    s.close()
    with pytest.raises(RuntimeError):
        s.build_index("T", ["x"], None, 5000, T0)
    assert s.query_offsets("T", "k0", 100, 0, 2**62) == []

    s2 = make(tmp_path, 8, 5)
    assert s2.file_paths == paths
    assert {k: s2.query_offsets("T", k, 100, 0, 2**62) for k in before} == before
    assert s2.max_index_commit_log_offset == 800 and s2.end_timestamp == T0 + 8000
    s2.build_index("T", ["k0"], None, 1000, T0 + 10_000)  # continues in the last, partly filled file
    assert s2.file_paths == paths
    assert s2.query_offsets("T", "k0", 100, 0, 2**62) == [1000] + before["k0"]
    s2.close()

    # an instance that was never load()ed loads on first use rather than shadowing the files
    s3 = IndexService(str(tmp_path / "index"), 8, 5)
    assert s3.query_offsets("T", "k0", 100, 0, 2**62) == [1000] + before["k0"]
    s3.close()


def test_load_rejects_file_of_other_geometry_and_drops_after_checkpoint(tmp_path):
    s = make(tmp_path, 8, 5)
    s.build_index_batch([("T", ["k"], None, i, T0 + i * 1000) for i in range(10)])  # 3 files
    ends = [struct.unpack_from(">q", open(p, "rb").read(16), 8)[0] for p in s.file_paths]
    s.close()
    assert not IndexService(str(tmp_path / "index"), 8, 6).load(True)
    (tmp_path / "index" / "notes.txt").write_text("ignored")
    s2 = IndexService(str(tmp_path / "index"), 8, 5)
    assert s2.load(False, index_msg_timestamp=ends[0])
    assert len(s2.file_paths) == 1
    assert s2.query_offsets("T", "k", 100, 0, 2**62) == [3, 2, 1, 0]
    s2.close()


def test_delete_expired(tmp_path):
    s = make(tmp_path, 8, 5)  # 4 entries per file
    s.build_index_batch([("T", ["k"], None, i * 100, T0 + i * 1000) for i in range(14)])
    paths = s.file_paths
    assert len(paths) == 4  # endPhyOffsets 300, 700, 1100, 1300
    assert s.delete_expired(0) == 0
    assert s.delete_expired(300) == 0  # endPhyOffset must be strictly below
    assert s.delete_expired(301) == 1
    assert not os.path.exists(paths[0]) and s.file_paths == paths[1:]
    assert s.query_offsets("T", "k", 100, 0, 2**62) == [i * 100 for i in range(13, 3, -1)]
    assert s.delete_expired(10**9) == 2  # never the file being written
    assert s.file_paths == paths[3:]
    assert s.query_offsets("T", "k", 100, 0, 2**62) == [1300, 1200]
    s.destroy()
    assert s.file_paths == [] and os.listdir(tmp_path / "index") == []


def test_flush_records_index_msg_timestamp_of_full_files(tmp_path):
    s = make(tmp_path, 8, 5)
    s.build_index_batch([("T", ["k"], None, i, T0 + i * 1000) for i in range(6)])
    assert s.index_msg_timestamp == 0
    s.flush()
    assert s.index_msg_timestamp == T0 + 3000
    s.close()


def test_indexing_goes_on_while_a_flush_waits_for_the_disk(tmp_path, monkeypatch):
    """The reput thread (and the event loop's inline dispatch) index every round under the service's
    lock: a flush must not hold it while the disk writes back."""
    from tidalmq.store import index_service

    s = make(tmp_path, 8, 5)
    s.build_index_batch([("T", ["k"], None, i, T0 + i * 1000) for i in range(6)])  # one full file, one not
    in_sync, release = threading.Event(), threading.Event()
    synced: list[str] = []

    def slow_sync(path):
        in_sync.set()
        assert release.wait(10)
        synced.append(path)

    monkeypatch.setattr(index_service, "sync_mapped", slow_sync)
    flusher = threading.Thread(target=s.flush)
    flusher.start()
    try:
        assert in_sync.wait(10)
        done = threading.Event()
        def index_then_say_so() -> None:
            s.build_index("T", ["k"], None, 100, T0 + 9000)
            done.set()
        indexer = threading.Thread(target=index_then_say_so)
        indexer.start()
        assert done.wait(5), "indexing waited for the flush's sync"
        assert s.query_offsets("T", "k", 100, 0, 2**62)[0] == 100
        assert s.index_msg_timestamp == 0  # nothing is called durable before its sync returned
    finally:
        release.set()
        flusher.join(10)
    assert synced == s.file_paths
    assert s.index_msg_timestamp == T0 + 3000
    synced.clear()
    s.flush()  # the entry indexed during the sync made its file dirty again
    assert synced == s.file_paths[-1:]
    s.close()


def test_a_flush_skips_an_index_file_deleted_while_it_synced(tmp_path, monkeypatch):
    from tidalmq.store import index_service

    s = make(tmp_path, 8, 5)
    s.build_index_batch([("T", ["k"], None, i, T0 + i * 1000) for i in range(10)])
    oldest = s.file_paths[0]
    real = index_service.sync_mapped

    def sync_after_retention(path):
        if path == oldest:
            assert s.delete_expired(10**9) >= 1
        real(path)

    monkeypatch.setattr(index_service, "sync_mapped", sync_after_retention)
    s.flush()  # no error: the deleted file needs no sync
    assert oldest not in s.file_paths and not os.path.exists(oldest)
    assert s.query_offsets("T", "k", 100, 0, 2**62)[0] == 9
    s.close()


def test_a_failed_index_sync_leaves_that_file_and_the_rest_for_the_next_flush(tmp_path, monkeypatch):
    import errno

    from tidalmq.store import index_service

    s = make(tmp_path, 8, 5)
    s.build_index_batch([("T", ["k"], None, i, T0 + i * 1000) for i in range(10)])  # three files
    real = index_service.sync_mapped
    synced: list[str] = []

    def failing(path):
        raise OSError(errno.EIO, "I/O error")

    monkeypatch.setattr(index_service, "sync_mapped", failing)
    with pytest.raises(OSError):
        s.flush()
    assert s.index_msg_timestamp == 0

    def recording(path):
        synced.append(path)
        real(path)

    monkeypatch.setattr(index_service, "sync_mapped", recording)
    s.flush()
    assert synced == s.file_paths  # none was taken for synced by the failed flush
    assert s.index_msg_timestamp > 0
    s.close()


def test_scalar_and_vector_paths_write_identical_bytes(tmp_path):
    items = [
        (
            f"Topic{i % 3}",
            [f"k{i % 7}", f"x{i}"] if i % 5 else [],
            f"U{i}" if i % 2 else None,
            i * 64,
            T0 + i * 333,
        )
        for i in range(300)
    ]
    a = make(tmp_path, 13, 50, SCALAR, sub="a")
    b = make(tmp_path, 13, 50, VECTOR, sub="b")
    for j in range(0, len(items), 1):
        a.build_index_batch(items[j : j + 1])
    for j in range(0, len(items), 37):
        b.build_index_batch(items[j : j + 37])
    pa, pb = a.file_paths, b.file_paths
    assert len(pa) == len(pb) > 5
    a.close()
    b.close()
    for x, y in zip(pa, pb, strict=True):
        assert open(x, "rb").read() == open(y, "rb").read()


def _reput_rounds(n_msgs: int, topics: list[str], seed: int) -> list[tuple]:
    """Records like the reput thread dispatches: a unique key each, KEYS as a list (often empty)."""
    rng = random.Random(seed)
    out = []
    for i in range(n_msgs):
        n_keys = rng.choice([0, 0, 1, 1, 1, 2, 3])
        keys = [
            rng.choice([f"order-{rng.randrange(50)}", f"k{i}", "订单", "😀", "x" * rng.randrange(1, 40)])
            for _ in range(n_keys)
        ]
        out.append((rng.choice(topics), keys, UNIQ[i % len(UNIQ)][:-4] + f"{i:04X}", i * 64, T0 + i * 333))
    return out


@pytest.mark.parametrize(
    ("topics", "round_size"),
    [(["TopicA"], 37), (["TopicA"], 200), (["TopicA", "TopicB", "主题"], 37), (["T", "U"], 1), (["T"], 9)],
)
@pytest.mark.parametrize("shape", ["mixed keys", "uniq only", "one key each", "two keys each"])
def test_reput_rounds_write_the_bytes_of_the_scalar_path(tmp_path, topics, round_size, shape):
    items = _reput_rounds(400, topics, seed=round_size)
    if shape == "uniq only":
        items = [(t, [], u, o, ts) for t, _, u, o, ts in items]
    elif shape == "one key each":
        items = [(t, [f"order-{i % 13}"], u, o, ts) for i, (t, _, u, o, ts) in enumerate(items)]
    elif shape == "two keys each":
        items = [(t, [f"a{i % 7}", "é€"], u, o, ts) for i, (t, _, u, o, ts) in enumerate(items)]
    a = make(tmp_path, 13, 97, SCALAR, sub="a")
    b = make(tmp_path, 13, 97, VECTOR, sub="b")
    c = make(tmp_path, 13, 97, None, sub="c")  # the default threshold
    for j in range(0, len(items)):
        a.build_index_batch(items[j : j + 1])
    for j in range(0, len(items), round_size):
        b.build_index_batch(items[j : j + round_size])
        c.build_index_batch(iter(items[j : j + round_size]))  # any iterable
    paths = [a.file_paths, b.file_paths, c.file_paths]
    assert len(paths[0]) == len(paths[1]) == len(paths[2]) > 3
    for s in (a, b, c):
        s.close()
    for x, y, z in zip(*paths, strict=True):
        assert open(x, "rb").read() == open(y, "rb").read() == open(z, "rb").read()


@pytest.mark.parametrize("threshold", [VECTOR, None])
def test_rounds_the_column_path_hands_back(tmp_path, threshold):
    """Rounds with a record the column-wise path does not take (skipped offsets, no unique key, KEYS
    strings, empty keys, tuples of keys) are indexed as record by record."""
    rounds: list[list[tuple[str, Any, str | None, int, int]]] = [
        [("T", ["a"], f"U{i}", 100 + i, T0) for i in range(10)],
        [("T", ["a"], f"V{i}", 50 + i, T0) for i in range(10)],  # below the newest offset: all skipped
        [("T", ["b"], f"W{i}", 120 - i, T0) for i in range(10)],  # decreasing: the first one only
        [("T", ["c"], None if i % 2 else f"X{i}", 200 + i, T0) for i in range(10)],
        [("T", "d e", f"Y{i}", 300 + i, T0) for i in range(10)],
        [("T", ["", "f"], f"Z{i}", 400 + i, T0) for i in range(10)],
        [("T", ("g",), f"Q{i}", 500 + i, T0) for i in range(10)],
        [("T", [], f"R{i}", 600 + i, T0) for i in range(10)],
    ]
    a = make(tmp_path, 7, 1000, SCALAR, sub="a")
    b = make(tmp_path, 7, 1000, threshold, sub="b")
    for r in rounds:
        for it in r:
            a.build_index_batch([it])
        b.build_index_batch(r)
    q = b.query_offsets
    assert q("T", "a", 100, 0, 2**62) == list(range(109, 99, -1))
    assert q("T", "V3", 100, 0, 2**62) == []
    assert q("T", "b", 100, 0, 2**62) == [120]
    assert q("T", "c", 100, 0, 2**62) == list(range(209, 199, -1))
    assert q("T", "X4", 100, 0, 2**62) == [204] and q("T", "X5", 100, 0, 2**62) == []
    assert q("T", "e", 100, 0, 2**62) == list(range(309, 299, -1))
    assert q("T", "f", 100, 0, 2**62) == list(range(409, 399, -1))
    assert q("T", "", 100, 0, 2**62) == []
    assert q("T", "g", 100, 0, 2**62) == list(range(509, 499, -1))
    assert q("T", "R9", 100, 0, 2**62) == [609]
    pa, pb = a.file_paths, b.file_paths
    a.close()
    b.close()
    assert [open(p, "rb").read() for p in pa] == [open(p, "rb").read() for p in pb]


@pytest.mark.parametrize("n", [5, 100, 128, 129, 600])
@pytest.mark.parametrize("slots", [1, 3, 50, 100_003])
@pytest.mark.parametrize("same_key", [False, True])
@pytest.mark.parametrize("damaged", [False, True])
def test_put_hashed_batch_matches_put_hashed(tmp_path, n, slots, same_key, damaged):
    """Batches with entries sharing slots, and slots holding numbers RocketMQ treats as empty (negative,
    beyond the entry count) or as taken (in the batch's own range), chain exactly like entry-by-entry puts."""
    rng = random.Random(n * 7 + slots)
    num = 2 * n + 10
    a = IndexFile(str(tmp_path / "a"), slots, num, create=True)
    b = IndexFile(str(tmp_path / "b"), slots, num, create=True)
    for i in range(n // 2):
        h = rng.randrange(2**31)
        a.put_hashed(h, i, T0 + i)
        b.put_hashed(h, i, T0 + i)
    base = a.index_count
    hashes = rng.sample(range(2**31), n)  # distinct keys: with 100_003 slots, mostly distinct slots
    if same_key:
        hashes[n // 3 : n // 3 + max(2, n // 4)] = [hashes[n // 3]] * max(2, n // 4)
    if damaged:
        for f in (a, b):  # the same damage in both files, in the slots the batch uses
            r = random.Random(slots)
            for h in hashes[::3]:
                f._slots[h % slots] = r.choice([-5, -(2**31), base, base + 3, base + n, 2**31 - 1])
    offs = [1000 + i for i in range(n)]
    tss = [T0 + 5000 + i * 700 for i in range(n)]
    for h, o, t in zip(hashes, offs, tss, strict=True):
        assert a.put_hashed(h, o, t)
    assert b.put_hashed_batch(np.array(hashes, dtype=np.int32), np.array(offs), np.array(tss)) == n
    assert (a.hash_slot_count, a.index_count) == (b.hash_slot_count, b.index_count)
    a.close()
    b.close()
    assert (tmp_path / "a").read_bytes() == (tmp_path / "b").read_bytes()


def test_concurrent_build_and_query(tmp_path):
    s = make(tmp_path, 101, 2_000)
    errors: list[BaseException] = []
    done = threading.Event()

    def reader():
        try:
            while not done.is_set():
                got = s.query_offsets("T", "hot", 50, 0, 2**62)
                assert got == sorted(got, reverse=True) and len(got) == len(set(got))
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=reader) for _ in range(2)]
    for t in threads:
        t.start()
    for r in range(100):
        s.build_index_batch(
            [("T", ["hot", f"k{r}-{i}"], None, r * 100 + i, T0 + r * 1000) for i in range(50)]
        )
    done.set()
    for t in threads:
        t.join()
    assert not errors
    assert s.query_offsets("T", "hot", 3, 0, 2**62) == [9949, 9948, 9947]
    assert len(s.file_paths) == 6
    s.close()


# ---------------------------------------------------------------------------- model check

KEY = st.text(alphabet="AaBbC", max_size=2)  # "Aa"/"BB" collide in Java's hashCode
ITEM = st.tuples(
    st.sampled_from(["T1", "T2"]),
    st.lists(KEY, max_size=3),
    st.none() | KEY,
    st.integers(0, 3),  # offset step (0: same record dispatched again)
    st.integers(0, 2),  # timestamp step in seconds
)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    steps=st.lists(ITEM, min_size=1, max_size=60),
    threshold=st.sampled_from([SCALAR, VECTOR, 12]),
    geometry=st.sampled_from([(1, 4), (3, 7), (16, 64)]),
    data=st.data(),
)
def test_matches_dict_model(tmp_path_factory, steps, threshold, geometry, data):
    root = tmp_path_factory.mktemp("model")
    slots, num = geometry
    s = make(root, slots, num, threshold)
    model: list[tuple[int, int, int]] = []  # (keyHash, offset, ts), in index order
    items = []
    used = {("T1", "zz")}
    off, ts = 0, T0
    for topic, keys, uniq, d_off, d_ts in steps:
        off += d_off
        ts += d_ts * 1000
        items.append((topic, keys, uniq, off, ts))
        for k in ([uniq] if uniq is not None else []) + [k for k in keys if k]:
            model.append((java_abs_hash(f"{topic}#{k}"), off, ts))
            used.add((topic, k))
    cuts = data.draw(st.lists(st.integers(0, len(items)), max_size=8), label="batch cuts")
    reopen_at = data.draw(st.none() | st.sampled_from(cuts or [0]), label="reopen before batch at")
    bounds = sorted({0, len(items), *cuts})
    for lo, hi in zip(bounds, bounds[1:], strict=False):
        if reopen_at is not None and lo == reopen_at:
            s.close()
            s = make(root, slots, num, threshold)
        s.build_index_batch(items[lo:hi])
    assert s.max_index_commit_log_offset == (model[-1][1] if model else 0)

    span = (ts - T0) // 1000 + 2
    queries = data.draw(
        st.lists(
            st.tuples(
                st.sampled_from(sorted(used)), st.integers(1, 8), st.integers(-1, span), st.integers(0, span)
            ),
            min_size=1,
            max_size=12,
        )
    )
    for (topic, key), max_num, b, e in queries:
        begin, end = T0 + b * 1000 - (b % 2) * 500, T0 + (b + e) * 1000
        h = java_abs_hash(f"{topic}#{key}")
        expected: list[int] = []
        for kh, o, t in reversed(model):
            if len(expected) >= max_num:
                break
            if kh == h and begin <= t <= end and o not in expected:
                expected.append(o)
        assert s.query_offsets(topic, key, max_num, begin, end) == expected
    # the whole history, as a final check
    for topic, key in sorted(used):
        h = java_abs_hash(f"{topic}#{key}")
        expected = list(dict.fromkeys(o for kh, o, _ in reversed(model) if kh == h))
        assert s.query_offsets(topic, key, 10**6, 0, 2**62) == expected
    s.destroy()
    s.close()


def test_after_unclean_exit_everything_redispatched_is_indexed(tmp_path):
    s = make(tmp_path, 16, 100)
    s.build_index_batch([("T", ["k"], None, i * 100, T0 + i * 1000) for i in range(10)])
    s.close()
    # crash: the CommitLog was truncated at 500 and new records now reuse offsets 500.. with new keys
    s2 = IndexService(str(tmp_path / "index"), 16, 100)
    assert s2.load(False)
    s2.build_index_batch([("T", ["k"], None, i * 100, T0 + i * 1000) for i in range(3, 5)])  # re-dispatch
    s2.build_index_batch([("T", ["new"], None, 500 + i * 100, T0 + 20_000 + i) for i in range(3)])
    assert s2.query_offsets("T", "new", 10, 0, 2**62) == [700, 600, 500]
    assert s2.query_offsets("T", "k", 100, 0, 2**62) == [400, 300, 900, 800, 700, 600, 500, 200, 100, 0]
    s2.close()


@pytest.mark.parametrize("shape", ["uniq-only", "uniq+keys", "some-without-uniq", "two-topics"])
def test_build_index_columns_writes_what_build_index_batch_writes(tmp_path, shape) -> None:
    n = 40
    topics = ["T" if shape != "two-topics" or i % 3 else "U" for i in range(n)]
    keyss = [[f"k{i}", "shared"] if shape == "uniq+keys" and i % 2 else None for i in range(n)]
    uniqs = [None if shape == "some-without-uniq" and i % 4 == 0 else f"{i:032X}" for i in range(n)]
    offsets = np.arange(n, dtype=np.int64) * 1000 + 7
    times = np.full(n, 1_700_000_000_000, dtype=np.int64)
    by_columns = make(tmp_path, slots=512, num=400, sub="columns")
    by_items = make(tmp_path, slots=512, num=400, sub="items")
    by_columns.build_index_columns(topics, keyss, uniqs, offsets, times)
    by_items.build_index_batch(list(zip(topics, keyss, uniqs, offsets.tolist(), times.tolist(), strict=True)))
    by_columns.flush()
    by_items.flush()
    assert (tmp_path / "columns").exists()
    for d in ("columns", "items"):
        assert len(os.listdir(tmp_path / d)) == 1
    data = [open(os.path.join(tmp_path / d, os.listdir(tmp_path / d)[0]), "rb").read() for d in ("columns", "items")]
    assert data[0] == data[1]
    some, uniq = next((i, u) for i, u in enumerate(uniqs) if u is not None)
    assert by_columns.query_offsets(topics[some], uniq, 10, 0, 2**62) == [int(offsets[some])]

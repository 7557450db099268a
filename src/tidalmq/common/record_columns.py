"""Many CommitLog records read column-wise with numpy (``record_columns``): the layout and checks of
``record.view_record``, for the reput and recovery scans that read thousands of records at once.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from tidalmq.common.columns import gather_be
from tidalmq.common.record import (
    _V6_HOSTS,
    HEAD_DTYPE,
    LAYOUTS,
    MESSAGE_MAGIC_CODE,
    MESSAGE_MAGIC_CODE_V2,
    POS_BORNHOST,
)


class RecordColumns(NamedTuple):
    """Fields and section positions of many records (``record_columns``), one numpy array each."""

    head: np.ndarray  # HEAD_DTYPE: TOTALSIZE .. BORNTIMESTAMP
    end: np.ndarray  # int64 positions after each record
    store_ts: np.ndarray
    prepared: np.ndarray
    body_at: np.ndarray
    body_len: np.ndarray
    topic_at: np.ndarray
    topic_len: np.ndarray
    props_at: np.ndarray
    props_len: np.ndarray
    ok: np.ndarray  # bool: the checks of ``view_record`` (magic, lengths adding up to TOTALSIZE)


def layout_offsets(column: str) -> np.ndarray:
    """The offset of ``column`` in every layout, indexed by SYSFLAG & _V6_HOSTS."""
    return np.array([LAYOUTS[k].offsets[column] if k in LAYOUTS else 0 for k in range(_V6_HOSTS + 1)],
                    dtype=np.int64)


_OFF_STORE_TS = layout_offsets("store_ts")
_OFF_PREPARED = layout_offsets("prepared")
_OFF_BODY_LEN = layout_offsets("body_len")
_AR_HEAD = np.arange(POS_BORNHOST, dtype=np.int64)


def record_columns(u8: np.ndarray, starts: np.ndarray) -> RecordColumns:
    """The records starting at ``starts`` of the byte array ``u8``, read column by column with numpy:
    the same layout and checks as ``view_record``, for when many records are read at once (reput,
    recovery). Each start's TOTALSIZE must be at least MIN_RECORD_SIZE and the record lie within ``u8``
    (what a walk of the TOTALSIZE chain establishes); positions are clamped into the record, so a
    record whose lengths lie reads as not ``ok`` instead of sending a gather outside it."""
    head = u8[starts[:, None] + _AR_HEAD].view(HEAD_DTYPE).ravel()
    end = starts + head["total"].astype(np.int64)
    hosts = head["sysflag"].astype(np.int64) & _V6_HOSTS
    last = end - 1
    store_ts = gather_be(u8, np.minimum(starts + _OFF_STORE_TS[hosts], last - 8), 8)
    prepared = gather_be(u8, np.minimum(starts + _OFF_PREPARED[hosts], last - 8), 8)
    len_at = np.minimum(starts + _OFF_BODY_LEN[hosts], last - 4)
    body_len = gather_be(u8, len_at, 4)
    body_at = len_at + 4
    magic = head["magic"]
    v2 = magic == MESSAGE_MAGIC_CODE_V2
    p_topic = np.minimum(body_at + np.maximum(body_len, 0), last - 2)
    topic_len = np.where(v2, gather_be(u8, p_topic, 2, signed=False), u8[p_topic].astype(np.int64))
    topic_at = p_topic + np.where(v2, 2, 1)
    p_props = np.minimum(topic_at + topic_len, last - 1)
    props_len = gather_be(u8, p_props, 2, signed=False)
    props_at = p_props + 2
    ok = ((magic == MESSAGE_MAGIC_CODE) | v2) & (body_len >= 0) & (body_at == starts + _OFF_BODY_LEN[hosts] + 4) \
        & (body_at + body_len + np.where(v2, 4, 3) <= end) & (topic_at + topic_len + 2 <= end) \
        & (props_at + props_len == end)
    return RecordColumns(head, end, store_ts, prepared, body_at, body_len, topic_at, topic_len, props_at, props_len,
                         ok)

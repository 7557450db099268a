"""Pure encoders and decoders of the client side of the protocol: no sockets, no asyncio.

- SEND_MESSAGE_V2 headers (single-letter fields) and the batch body of ``MessageDecoder.encodeMessages``;
- body compression as RocketMQ's producers do it (zlib, ``COMPRESSED`` sysflag);
- PULL_MESSAGE bodies (concatenated CommitLog records) into ``MessageExt``;
- topic routes (``TopicRouteData`` JSON) into publish and subscribe queue lists;
- the heartbeat's ``HeartbeatData`` JSON and subscription expressions.
"""

from __future__ import annotations

import logging
import os
import socket
import struct
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from tidalmq.client.message import Message, MessageExt, MessageQueue
from tidalmq.common import fastjson
from tidalmq.common import message as mc
from tidalmq.common import sysflag as sf
from tidalmq.common.record import MIN_RECORD_SIZE, POS_QUEUEOFFSET, RecordError, view_record
from tidalmq.common.taghash import tags_hash_code
from tidalmq.remoting.command import encode_ext_fields
from tidalmq.remoting.protocol.broker_headers import SEND_V2, SendMessageRequestHeader

DEFAULT_TOPIC = "TBW102"
DEFAULT_TOPIC_QUEUE_NUMS = 4
COMPRESS_LEVEL = 5  # zipCompressLevel / rocketmq.message.compressLevel
MASTER_ID = 0
PERM_WRITE = 0x2
PERM_READ = 0x4
SUB_ALL = "*"

_BATCH_HEAD = struct.Struct(">iiiii")
_SHORT = struct.Struct(">h")
_INT = struct.Struct(">i")
_LONG = struct.Struct(">q")

log = logging.getLogger(__name__)


# ---- send -----------------------------------------------------------------------------------------

def send_header_v2(*, group: str, topic: str, queue_id: int, sysflag: int, born_timestamp: int, flag: int,
                   properties: str, reconsume_times: int = 0, max_reconsume_times: int | None = None,
                   batch: bool = False, broker_name: str | None = None,
                   default_topic_queue_nums: int = DEFAULT_TOPIC_QUEUE_NUMS) -> dict[str, str]:
    """SendMessageRequestHeaderV2 with its single-letter field names."""
    return SendMessageRequestHeader(
        producer_group=group, topic=topic, default_topic=DEFAULT_TOPIC, default_topic_queue_nums=default_topic_queue_nums,
        queue_id=queue_id, sys_flag=sysflag, born_timestamp=born_timestamp, flag=flag, properties=properties,
        reconsume_times=reconsume_times, unit_mode=False, max_reconsume_times=max_reconsume_times, batch=batch,
        broker_name=broker_name or None,
    ).to_ext(SEND_V2)


# The two fields a template leaves out, encoded per send: their keys in the V2 spelling.
_BORN_KEY = SendMessageRequestHeader.key_of("born_timestamp", SEND_V2)
_PROPERTIES_KEY = SendMessageRequestHeader.key_of("properties", SEND_V2)


class SendHeaderTemplates:
    """SendMessageRequestHeaderV2 encoded for the wire (``RemotingCommand.ext_encoded``) from templates:
    the fields that stay the same from one send to the next (group, topic, queue, flags ...) are encoded
    once per combination, and only the born timestamp (``g``) and properties (``i``) are encoded per send.
    Holds at most ``max_entries`` templates (cleared when full)."""

    def __init__(self, max_entries: int = 4096) -> None:
        self._cache: dict[tuple[Any, ...], bytes] = {}
        self._max = max_entries

    def encode(self, *, group: str, topic: str, queue_id: int, sysflag: int, born_timestamp: int, flag: int,
               properties: str, reconsume_times: int = 0, max_reconsume_times: int | None = None,
               batch: bool = False, broker_name: str | None = None,
               default_topic_queue_nums: int = DEFAULT_TOPIC_QUEUE_NUMS) -> bytes:
        """The same fields as ``send_header_v2`` with the same arguments, encoded."""
        key = (group, topic, queue_id, sysflag, flag, reconsume_times, max_reconsume_times, batch, broker_name,
               default_topic_queue_nums)
        const = self._cache.get(key)
        if const is None:
            fields = send_header_v2(group=group, topic=topic, queue_id=queue_id, sysflag=sysflag, born_timestamp=0,
                                    flag=flag, properties="", reconsume_times=reconsume_times,
                                    max_reconsume_times=max_reconsume_times, batch=batch, broker_name=broker_name,
                                    default_topic_queue_nums=default_topic_queue_nums)
            del fields[_BORN_KEY], fields[_PROPERTIES_KEY]
            const = bytes(encode_ext_fields(fields))
            if len(self._cache) >= self._max:
                self._cache.clear()
            self._cache[key] = const
        ts = str(born_timestamp).encode()
        pb = properties.encode("utf-8")
        return b"".join((const, _G_PREFIX, _INT.pack(len(ts)), ts, _I_PREFIX, _INT.pack(len(pb)), pb))


_G_PREFIX = _SHORT.pack(len(_BORN_KEY)) + _BORN_KEY.encode()  # 2-byte key length + key, as encode_ext_fields writes them
_I_PREFIX = _SHORT.pack(len(_PROPERTIES_KEY)) + _PROPERTIES_KEY.encode()


def compress_body(body: bytes, threshold: int, level: int = COMPRESS_LEVEL) -> tuple[bytes, bool]:
    """Compress a body of ``threshold`` bytes or more (DefaultMQProducerImpl.tryToCompressMessage)."""
    if threshold < 0 or len(body) < threshold:
        return body, False
    return zlib.compress(body, level), True


def encode_batch(msgs: Sequence[Message]) -> bytes:
    """The batch body: for each message TOTALSIZE, MAGIC (0), BODYCRC (0), FLAG, body, properties."""
    parts: list[bytes] = []
    for m in msgs:
        props = mc.encode_properties(m.properties).encode("utf-8")
        total = _BATCH_HEAD.size + len(m.body) + 2 + len(props)
        parts.append(_BATCH_HEAD.pack(total, 0, 0, m.flag, len(m.body)))
        parts.append(m.body)
        parts.append(_SHORT.pack(len(props)))
        parts.append(props)
    return b"".join(parts)


def decode_batch(body: bytes) -> list[tuple[int, bytes, dict[str, str]]]:
    """The inverse of ``encode_batch`` (for tests and fakes): (flag, body, properties) of each message."""
    out = []
    pos = 0
    while pos < len(body):
        total, _magic, _crc, flag, blen = _BATCH_HEAD.unpack_from(body, pos)
        p = pos + _BATCH_HEAD.size
        mbody = body[p : p + blen]
        p += blen
        (plen,) = _SHORT.unpack_from(body, p)
        props = mc.decode_properties(body[p + 2 : p + 2 + plen].decode("utf-8"))
        out.append((flag, mbody, props))
        pos += total
    return out


# ---- pull -----------------------------------------------------------------------------------------

def decode_messages(body: bytes | memoryview, broker_name: str = "") -> list[MessageExt]:
    """The records of a PULL_MESSAGE (or QUERY_MESSAGE) body, bodies uncompressed.

    A record that does not decode (bad magic or lengths, a topic or properties that are not text) is
    skipped and the rest of the batch is delivered; one warning per body names the queue offsets of the
    skipped records. Only when a record's TOTALSIZE itself is unusable is the rest of the body lost
    (there is no way to find the next record), and the warning says so."""
    out: list[MessageExt] = []
    buf = memoryview(body)
    pos, n = 0, len(buf)
    skipped: list[int] = []
    lost = 0
    reason = ""
    while pos + 8 <= n:
        try:
            v = view_record(buf, pos)
            mbody = v.body()
            if v.sysflag & sf.COMPRESSED_FLAG:
                try:
                    mbody = zlib.decompress(mbody)
                except zlib.error:
                    pass  # as MessageDecoder: leave a body that does not inflate as it is
            out.append(MessageExt.from_view(v, mbody, broker_name))
            pos = v.end
        except RecordError as e:
            total = _INT.unpack_from(buf, pos)[0]
            skipped.append(_LONG.unpack_from(buf, pos + POS_QUEUEOFFSET)[0] if pos + POS_QUEUEOFFSET + 8 <= n else -1)
            reason = str(e)
            if total < MIN_RECORD_SIZE or pos + total > n:
                lost = n - pos
                break
            pos += total
    if skipped:
        log.warning("pull body from broker %r: skipped %d undecodable record(s) at queue offset(s) %s%s (%s)",
                    broker_name, len(skipped), skipped, f"; {lost} bytes after them unreadable" if lost else "",
                    reason)
    return out


# ---- routes -----------------------------------------------------------------------------------------

@dataclass
class TopicRoute:
    """A parsed TopicRouteData: queue data per broker and the addresses of each broker."""

    topic: str
    queue_datas: list[dict[str, Any]]
    broker_addrs: dict[str, dict[int, str]]
    order_topic_conf: str | None = None
    raw: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def parse(cls, topic: str, data: bytes | str | dict[str, Any]) -> TopicRoute:
        obj = data if isinstance(data, dict) else fastjson.loads(data)
        addrs: dict[str, dict[int, str]] = {}
        for bd in obj.get("brokerDatas") or []:
            addrs[bd["brokerName"]] = {int(k): v for k, v in (bd.get("brokerAddrs") or {}).items()}
        qds = sorted(obj.get("queueDatas") or [], key=lambda q: q["brokerName"])
        return cls(topic, qds, addrs, obj.get("orderTopicConf"), obj)

    def master_addr(self, broker_name: str) -> str | None:
        return self.broker_addrs.get(broker_name, {}).get(MASTER_ID)

    def publish_queues(self) -> list[MessageQueue]:
        """Writable queues of brokers that have a master (topicRouteData2TopicPublishInfo)."""
        if self.order_topic_conf:
            out = []
            for item in self.order_topic_conf.split(";"):
                name, _, nums = item.partition(":")
                if name and nums.isdigit():
                    out += [MessageQueue(self.topic, name, i) for i in range(int(nums))]
            return out
        out = []
        for qd in self.queue_datas:
            if not int(qd.get("perm", 6)) & PERM_WRITE or self.master_addr(qd["brokerName"]) is None:
                continue
            out += [MessageQueue(self.topic, qd["brokerName"], i) for i in range(int(qd["writeQueueNums"]))]
        return out

    def subscribe_queues(self) -> list[MessageQueue]:
        """Readable queues (topicRouteData2TopicSubscribeInfo), sorted."""
        out = []
        for qd in self.queue_datas:
            if int(qd.get("perm", 6)) & PERM_READ:
                out += [MessageQueue(self.topic, qd["brokerName"], i) for i in range(int(qd["readQueueNums"]))]
        return sorted(out)

    def with_topic(self, topic: str) -> TopicRoute:
        """This route for another topic (the default-topic route used to auto-create a topic)."""
        return TopicRoute(topic, self.queue_datas, self.broker_addrs, None, self.raw)


# ---- heartbeat and subscriptions --------------------------------------------------------------------

EXPRESSION_TYPES = ("TAG", "SQL92")


@dataclass
class Subscription:
    """SubscriptionData: a topic and its tag expression (``TagA || TagB`` or ``*``), or a SQL92
    selector over the message's properties (``expression_type="SQL92"``, filtered by the broker)."""

    topic: str
    expression: str = SUB_ALL
    version: int = 0
    tags: set[str] = field(default_factory=set)
    expression_type: str = "TAG"

    @classmethod
    def build(cls, topic: str, expression: str | None, version: int, expression_type: str = "TAG") -> Subscription:
        if expression_type != "TAG":
            if expression_type not in EXPRESSION_TYPES:
                raise ValueError(f"expression type must be one of {EXPRESSION_TYPES}, got {expression_type!r}")
            sql = (expression or "").strip()
            if not sql:
                raise ValueError("a SQL92 subscription needs an expression")
            return cls(topic, sql, version, set(), expression_type)
        expr = (expression or "").strip() or SUB_ALL
        tags: set[str] = set()
        if expr != SUB_ALL:
            tags = {t.strip() for t in expr.split("||") if t.strip()}
        return cls(topic, expr if tags or expr == SUB_ALL else SUB_ALL, version, tags)

    @property
    def matches_all(self) -> bool:
        return not self.tags

    def matches(self, tags: str | None) -> bool:
        """The exact check after the broker's tag-hash filter (PullAPIWrapper.processPullResult)."""
        return not self.tags or (tags is not None and tags in self.tags)

    def to_json(self) -> dict[str, Any]:
        return {
            "classFilterMode": False,
            "codeSet": sorted(tags_hash_code(t) for t in self.tags),
            "expressionType": self.expression_type,
            "subString": self.expression,
            "subVersion": self.version,
            "tagsSet": sorted(self.tags),
            "topic": self.topic,
        }


def consumer_data(group: str, *, consume_type: str, message_model: str, consume_from_where: str,
                  subscriptions: Iterable[Subscription]) -> dict[str, Any]:
    return {
        "consumeFromWhere": consume_from_where,
        "consumeType": consume_type,
        "groupName": group,
        "messageModel": message_model,
        "subscriptionDataSet": [s.to_json() for s in subscriptions],
        "unitMode": False,
    }


def heartbeat_body(client_id: str, producers: Iterable[str], consumers: Iterable[dict[str, Any]]) -> bytes:
    """HeartbeatData as the Java client's fastjson writes it."""
    return fastjson.dumpb({
        "clientID": client_id,
        "consumerDataSet": list(consumers),
        "producerDataSet": [{"groupName": g} for g in producers],
    })


def local_ip() -> str:
    """The address this host reaches the outside with (RemotingUtil.getLocalAddress), or loopback."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("10.255.255.255", 1))
            return s.getsockname()[0]
    except OSError:
        return "127.0.0.1"


def make_client_id(ip: str, instance_name: str | None, unit_name: str | None = None) -> str:
    """``ip@instanceName`` (ClientConfig.buildMQClientId); the instance name defaults to the pid."""
    cid = f"{ip}@{instance_name or os.getpid()}"
    if unit_name:
        cid += f"@{unit_name}"
    return cid

"""What ``Admin`` answers with (RocketMQ's ConsumeStats, OffsetWrapper, TopicOffset ... of
remoting.protocol.admin), and its error."""

from __future__ import annotations

from dataclasses import dataclass, field

from tidalmq.client.message import MessageQueue
from tidalmq.common import fastjson
from tidalmq.remoting.command import RemotingCommand
from tidalmq.remoting.protocol import broker_headers as bh
from tidalmq.remoting.transport import RemotingError


class AdminError(RemotingError):
    """A request the broker or NameServer refused: RocketMQ's code and remark."""


@dataclass
class QueueStatus:
    """Offsets of one queue: the first message still stored and the offset after the last one."""

    broker_name: str
    queue_id: int
    min_offset: int
    max_offset: int


@dataclass
class QueueProgress:
    """A consumer group's position in one queue; ``lag`` is what it has yet to consume."""

    topic: str
    broker_name: str
    queue_id: int
    broker_offset: int
    consumer_offset: int

    @property
    def lag(self) -> int:
        return max(0, self.broker_offset - max(self.consumer_offset, 0))


@dataclass
class OffsetWrapper:
    """One queue of a ConsumeStats (RocketMQ's OffsetWrapper): ``last_timestamp`` is the store time of
    the last message the group consumed there (0: none)."""

    topic: str
    broker_name: str
    queue_id: int
    broker_offset: int
    consumer_offset: int
    last_timestamp: int
    pull_offset: int = 0  # how far the group has pulled (RocketMQ 5's pullOffset)

    @property
    def diff(self) -> int:
        return self.broker_offset - self.consumer_offset

    @property
    def inflight(self) -> int:
        """Pulled, not yet acknowledged (RocketMQ 5's consumerProgress #Inflight)."""
        return self.pull_offset - self.consumer_offset


@dataclass
class ConsumeStats:
    """A group's ConsumeStats over the brokers: its queues and its consume TPS (the minute's gets)."""

    consume_tps: float = 0.0
    queues: list[OffsetWrapper] = field(default_factory=list)

    def total_diff(self) -> int:
        return sum(q.diff for q in self.queues)


def mq_key(key: str) -> tuple[str, str, int]:
    """A MessageQueue written as a map key by fastjson (its JSON text once read): (topic, broker, queue)."""
    mq = fastjson.loads(key)
    return mq["topic"], mq["brokerName"], int(mq["queueId"])


def offset_of(resp: RemotingCommand) -> int:
    """The offset an OffsetResponseHeader carries (-1: none)."""
    return bh.OffsetResponseHeader.parse(resp.ext_fields).offset


@dataclass
class RewindResult:
    offsets: dict[MessageQueue, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)  # e.g. "starts at its earliest retained message"
    refused: dict[str, str] = field(default_factory=dict)  # broker name -> remark

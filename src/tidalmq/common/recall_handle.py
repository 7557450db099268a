"""RocketMQ 5.3's recall handle (RecallMessageHandle.HandleV1): what a send of a scheduled message returns,
and what recalling it takes. ``"v1 <topic> <brokerName> <deliver ms> <uniq key>"``, URL-safe base64."""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass

from tidalmq.common.message import NAME_VALUE_SEPARATOR, PROPERTY_SEPARATOR

VERSION_1 = "v1"
_URLSAFE = bytes.maketrans(b"+/", b"-_")


class RecallHandleError(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class RecallHandle:
    topic: str
    broker_name: str
    timestamp: str  # the deliver time in ms, as text (RocketMQ parses it leniently: -1 when not a number)
    message_id: str  # the message's uniq key (client id)

    def encode(self) -> str:
        return encode_recall_handle(self.topic, self.broker_name, self.timestamp, self.message_id).decode("ascii")

    @property
    def deliver_ms(self) -> int:
        try:
            return int(self.timestamp)
        except ValueError:
            return -1


def encode_recall_handle(topic: str, broker_name: str, timestamp: str, message_id: str) -> bytes:
    """The handle's text (ASCII) of ``RecallHandle(...).encode()``, built without the object: the broker
    answers every single timer send with one."""
    raw = " ".join((VERSION_1, topic, broker_name, timestamp, message_id))
    # base64.urlsafe_b64encode's result, without its two wrappers
    return binascii.b2a_base64(raw.encode("utf-8"), newline=False).translate(_URLSAFE)


def decode_recall_handle(handle: str) -> RecallHandle:
    """RecallMessageHandle.decodeHandle: RecallHandleError("recall handle is invalid") for anything else."""
    if not handle:
        raise RecallHandleError("recall handle is invalid")
    try:
        raw = base64.urlsafe_b64decode(handle.encode("ascii")).decode("utf-8")
    except (binascii.Error, UnicodeError, ValueError):
        raise RecallHandleError("recall handle is invalid") from None
    items = raw.split(" ")
    if items[0] != VERSION_1 or len(items) < 5:
        raise RecallHandleError("recall handle is invalid")
    # Its topic and message id become a TIMER_DEL_UNIQKEY property: a separator would write other properties.
    if NAME_VALUE_SEPARATOR in raw or PROPERTY_SEPARATOR in raw:
        raise RecallHandleError("recall handle is invalid")
    return RecallHandle(items[1], items[2], items[3], items[4])

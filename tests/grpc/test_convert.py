"""The pure conversions of the gRPC endpoint (tidalmq.proxy.convert), without a server."""

from __future__ import annotations

import pytest

from tidalmq.client.message import MessageExt
from tidalmq.common import message as mc
from tidalmq.proxy import convert
from tidalmq.proxy.protocol import definition_pb2

Code = definition_pb2.Code


def _msg(**sys: object) -> definition_pb2.Message:
    m = definition_pb2.Message(topic=definition_pb2.Resource(name="T"), body=b"body")
    m.system_properties.message_id = "ID1"
    for k, v in sys.items():
        if k == "keys":
            m.system_properties.keys.extend(v)
        elif k == "delivery_ms":
            m.system_properties.delivery_timestamp.FromMilliseconds(v)
        else:
            setattr(m.system_properties, k, v)
    return m


def test_system_properties_become_rocketmq_properties() -> None:
    out = convert.to_remoting(_msg(tag="A", keys=["k1", "k2"], message_group="g", delivery_ms=1_700_000_000_123), 1024)
    assert out.properties[mc.UNIQ_KEY] == "ID1"
    assert out.properties[mc.TAGS] == "A"
    assert out.properties[mc.KEYS] == "k1 k2"
    assert out.properties[mc.SHARDING_KEY] == "g"
    assert out.properties[mc.TIMER_DELIVER_MS] == "1700000000123"


@pytest.mark.parametrize(("body", "code"), [(b"", Code.MESSAGE_BODY_EMPTY), (b"x" * 11, Code.MESSAGE_BODY_TOO_LARGE)])
def test_bodies_refused(body: bytes, code: int) -> None:
    m = _msg()
    m.body = body
    with pytest.raises(convert.ConvertError) as e:
        convert.to_remoting(m, 10)
    assert e.value.code == code


def test_stored_message_as_grpc() -> None:
    props = {mc.UNIQ_KEY: "U1", mc.TAGS: "A", mc.KEYS: "k1 k2", mc.SHARDING_KEY: "g", "color": "blue"}
    m = MessageExt("T", b"hello", 1, 7, 100, props, born_timestamp=1_000, born_host=("10.0.0.1", 5),
                   store_timestamp=2_000, store_host=("10.0.0.2", 6), reconsume_times=2)
    out = convert.to_grpc(m, "T", "handle")
    sp = out.system_properties
    assert (sp.message_id, sp.tag, list(sp.keys), sp.message_group) == ("U1", "A", ["k1", "k2"], "g")
    assert sp.message_type == definition_pb2.MessageType.FIFO
    assert sp.delivery_attempt == 3 and sp.receipt_handle == "handle" and sp.queue_offset == 7
    # The proxy's digest (GrpcConverter: MD5, BinaryUtil's upper-case hex), what the clients recompute.
    assert sp.body_digest.type == definition_pb2.DigestType.MD5
    assert sp.body_digest.checksum == "5D41402ABC4B2A76B9719D911017C592"
    assert dict(out.user_properties) == {"color": "blue"}


def test_priority_both_ways() -> None:
    """SystemProperties.priority ↔ _SYS_MSG_PRIORITY_ (RocketMQ 5.4); a received message shows it and the
    PRIORITY type only when the property holds a priority, and types follow parseFromMessageProperty."""
    assert convert.to_remoting(_msg(priority=0), 1024).properties[mc.PRIORITY] == "0"
    assert mc.PRIORITY not in convert.to_remoting(_msg(), 1024).properties
    with pytest.raises(convert.ConvertError) as e:
        convert.to_remoting(_msg(priority=-1), 1024)
    assert e.value.code == Code.BAD_REQUEST

    def received(props: dict[str, str]) -> definition_pb2.SystemProperties:
        return convert.to_grpc(MessageExt("T", b"x", 0, 0, 0, {mc.UNIQ_KEY: "U", **props}), "T").system_properties

    sp = received({mc.PRIORITY: "5"})
    assert sp.HasField("priority") and sp.priority == 5 and sp.message_type == definition_pb2.MessageType.PRIORITY
    assert not received({}).HasField("priority")
    assert not received({mc.PRIORITY: "high"}).HasField("priority")
    # a delivered delay message with a message group is DELAY, as RocketMQ's precedence says
    assert received({mc.TIMER_DELIVER_MS: "1", mc.SHARDING_KEY: "g"}).message_type == definition_pb2.MessageType.DELAY


def test_delivered_delay_message_shows_its_deliver_time() -> None:
    """delivery_timestamp from TIMER_DELIVER_MS (GrpcConverter), else from TIMER_OUT_MS (the deliver time of
    one sent with a relative delay); none for a delivered delay level, which keeps neither."""
    def shown(props: dict[str, str]) -> int | None:
        sp = convert.to_grpc(MessageExt("T", b"x", 0, 0, 0, {mc.UNIQ_KEY: "U", **props}), "T").system_properties
        assert sp.message_type == (definition_pb2.MessageType.DELAY if props.keys() & {mc.TIMER_DELIVER_MS,
                                   mc.TIMER_OUT_MS} else definition_pb2.MessageType.NORMAL)
        return sp.delivery_timestamp.ToMilliseconds() if sp.HasField("delivery_timestamp") else None

    assert shown({mc.TIMER_DELIVER_MS: "1700000000123", mc.TIMER_OUT_MS: "1700000000123"}) == 1_700_000_000_123
    # sent with TIMER_DELAY_SEC: delivered with TIMER_OUT_MS only (schedule/restore.py), still a DELAY message
    assert shown({mc.TIMER_OUT_MS: "1700000005000"}) == 1_700_000_005_000
    assert shown({mc.REAL_TOPIC: "T"}) is None


def test_a_stored_time_past_year_9999_is_passed_on_not_refused() -> None:
    """Times a client wrote into a message are shown as stored, even where protobuf's Timestamp helpers
    refuse them (years 1-9999 only): the receive of that message does not fail."""
    huge = 99_999_999_999_999_999
    m = MessageExt("T", b"x", 0, 0, 0, {mc.UNIQ_KEY: "U", mc.TIMER_DELIVER_MS: str(huge)}, born_timestamp=-1)
    sp = convert.to_grpc(m, "T").system_properties
    assert (sp.delivery_timestamp.seconds, sp.delivery_timestamp.nanos) == (huge // 1000, 999_000_000)
    assert (sp.born_timestamp.seconds, sp.born_timestamp.nanos) == (-1, 999_000_000)


def test_receipt_handles() -> None:
    handle = "5 1700000000000 30000 0 0 broker-a 3 9 12345"
    m = convert.handle_message("T", handle)
    assert (m.queue_id, m.queue_offset, m.broker_name) == (3, 9, "broker-a")
    for bad in ("", "1 2 3", "a b c d e f g h"):
        with pytest.raises(convert.ConvertError) as e:
            convert.handle_message("T", bad)
        assert e.value.code == Code.INVALID_RECEIPT_HANDLE

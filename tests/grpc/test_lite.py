"""Lite topics with the official 5.x client (rocketmq-python-client 5.1.2): a producer sends with
``lite_topic`` to a LITE parent topic, a LiteSimpleConsumer subscribed to some lite topics receives
exactly those, acks them, and sees its subscription changes (docs/grpc.md, "Lite topics")."""

from __future__ import annotations

import glob
import os
import threading
import time
from collections.abc import Iterator

import pytest
from rocketmq import ConsumeResult, LitePushConsumer, LiteSimpleConsumer, MessageListener
from rocketmq.grpc_protocol import Code, definition_pb2, service_pb2
from rocketmq.grpc_protocol.service_pb2_grpc import MessagingServiceStub

import grpc
from tests.client.helpers import uniq
from tests.compat.harness import create_topic
from tests.grpc.conftest import Clients, adopt_client_loop, run_off_main, typed_topic
from tests.grpc.test_messaging import message
from tests.grpc.test_types_and_recall import LOCAL_REFUSAL
from tests.support import Standalone, wait_for
from tidalmq.client import Admin, MessageExt
from tidalmq.client.admin import AdminError

pytestmark = pytest.mark.timeout(120)


def lite_parent(broker: Standalone, queues: int = 2) -> str:
    return typed_topic(broker, "LITE", queues)


@pytest.fixture
def parent(broker: Standalone) -> str:
    return lite_parent(broker)


class LiteClients(Clients):
    def lite_simple(self, topic: str, group: str, await_s: int = 2) -> LiteSimpleConsumer:
        c = LiteSimpleConsumer(topic, self.config(), group, await_duration=await_s)
        self.all.append(c)
        adopt_client_loop()
        c.startup()
        wait_for_settings(c)
        return c


def dead_letters(broker: Standalone, group: str, key: str, timeout: float) -> list[MessageExt]:
    """The messages of ``group``'s dead-letter topic with ``key``, once there are some."""

    async def dlq() -> list[MessageExt]:
        async with Admin(broker.namesrv_addr) as admin:
            try:
                return await admin.query_messages_by_key(f"%DLQ%{group}", key)
            except AdminError:  # the DLQ topic's route is not on the NameServer yet
                return []

    return wait_for(lambda: run_off_main(dlq()), timeout, what=f"a dead letter of {group} with key {key}")


def wait_for_settings(consumer, timeout: float = 10.0) -> None:  # noqa: ANN001
    """The 5.1.2 client refuses subscribe_lite (quota 0) until the endpoint's Settings, which carry the
    lite subscription quota, reached it over Telemetry; startup() returns before that."""
    manager = next(v for k, v in vars(consumer).items() if k.endswith("__subscription_manager"))
    deadline = time.monotonic() + timeout
    while manager.lite_subscription_quota <= 0:
        assert time.monotonic() < deadline, "no Settings from the endpoint"
        time.sleep(0.05)


@pytest.fixture
def lite_clients(broker: Standalone) -> Iterator[LiteClients]:
    cs = LiteClients(broker.grpc_endpoint)
    try:
        yield cs
    finally:
        cs.close()


def subscribe(consumer, lite: str) -> None:  # noqa: ANN001
    """subscribe_lite, then the client's own full sync. The 5.1.2 client's subscribe_lite puts the name
    into the request's lite_topic_set with ``extend`` (LiteTopicSubscriptionManager.subscribe_lite passes
    a string where a set is expected), so the endpoint is asked to add each of its characters as a lite
    topic; its periodic COMPLETE_ADD (every 30 s, or subscribe_lite_all) sends the right set."""
    consumer.subscribe_lite(lite)
    consumer.subscribe_lite_all()


def send_lite(p, topic: str, lite: str, body: bytes) -> str:  # noqa: ANN001
    m = message(topic, body)
    m.lite_topic = lite
    return p.send(m).message_id


def receive_until(consumer, want: int, deadline_s: float = 20.0, invisible_s: int = 15) -> list:  # noqa: ANN001
    got: list = []
    deadline = time.monotonic() + deadline_s
    while len(got) < want and time.monotonic() < deadline:
        got += consumer.receive(32, invisible_s) or []
    return got


def test_subscribed_lite_topics_only_then_ack(lite_clients: LiteClients, parent: str, broker: Standalone) -> None:
    """Messages of three lite topics; a consumer subscribed to two receives exactly theirs, with their
    lite topic and type LITE; once acked, none comes again. Each message is one CommitLog record,
    queued under its parent topic and under its lite topic's LMQ directory."""
    p = lite_clients.producer(parent)
    sent: dict[str, dict[str, bytes]] = {"alpha": {}, "beta": {}, "gamma": {}}
    for i in range(4):
        for lite in sent:
            body = f"{lite}-{i}".encode()
            sent[lite][send_lite(p, parent, lite, body)] = body
    c = lite_clients.lite_simple(parent, uniq("g5lite"))
    subscribe(c, "alpha")
    subscribe(c, "beta")
    want = {**sent["alpha"], **sent["beta"]}
    got: list = []
    deadline = time.monotonic() + 20
    while not set(want) <= {m.message_id for m in got} and time.monotonic() < deadline:
        got += c.receive(32, 15) or []
    # a set: a send the client retried after a timeout may be stored twice (at least once)
    assert {m.message_id: m.body for m in got} == want
    assert {m.lite_topic for m in got} == {"alpha", "beta"}
    assert {m.message_type for m in got} == {5}  # MessageType.LITE
    assert {m.topic for m in got} == {parent}
    for m in got:
        c.ack(m)
    assert c.receive(32, 2) == []  # acked: nothing of alpha or beta comes back, gamma is not subscribed
    for lite in sent:  # the store's consumequeue/%LMQ%$<parent>$<lite>/0
        found = glob.glob(os.path.join(glob.escape(str(broker.data_dir)), "**", "consumequeue",
                                       glob.escape(f"%LMQ%${parent}${lite}"), "0"), recursive=True)
        assert len(found) == 1, lite


def test_subscription_change_takes_effect(lite_clients: LiteClients, parent: str) -> None:
    """Unsubscribing stops a lite topic's messages; subscribing another brings its messages, those sent
    before the subscription included."""
    p = lite_clients.producer(parent)
    c = lite_clients.lite_simple(parent, uniq("g5lite"))
    subscribe(c, "x-topic")
    send_lite(p, parent, "x-topic", b"x-1")
    send_lite(p, parent, "y-topic", b"y-1")
    got = receive_until(c, 1)
    assert [m.body for m in got] == [b"x-1"]
    c.ack(got[0])
    c.unsubscribe_lite("x-topic")
    subscribe(c, "y-topic")
    send_lite(p, parent, "x-topic", b"x-2")
    got = receive_until(c, 1)
    assert [m.body for m in got] == [b"y-1"]
    c.ack(got[0])
    assert c.receive(32, 2) == []  # x-2 is not for this consumer any more


def test_long_polling_receive_wakes_on_arrival(lite_clients: LiteClients, parent: str) -> None:
    """A receive waiting on an empty subscribed lite topic answers as soon as a message arrives."""
    p = lite_clients.producer(parent)
    c = lite_clients.lite_simple(parent, uniq("g5lite"), await_s=10)
    subscribe(c, "waiting")
    start = time.monotonic()
    fut = c.receive_async(32, 15)
    send_lite(p, parent, "waiting", b"w-1")
    got = fut.result(timeout=15)
    assert [m.body for m in got] == [b"w-1"]
    assert time.monotonic() - start < 8  # woken by the arrival, not the end of the 10 s poll


def test_change_invisible_duration_and_redelivery(lite_clients: LiteClients, parent: str) -> None:
    """An unacked lite message comes back to its lite topic after its invisible time; a change of
    invisible duration gives a handle that acks it."""
    p = lite_clients.producer(parent)
    c = lite_clients.lite_simple(parent, uniq("g5lite"))
    subscribe(c, "redo")
    send_lite(p, parent, "redo", b"r-1")
    first = receive_until(c, 1, invisible_s=2)
    assert [m.body for m in first] == [b"r-1"]
    again = receive_until(c, 1, deadline_s=30, invisible_s=20)  # not acked: back after 2 s
    assert [m.body for m in again] == [b"r-1"]
    assert again[0].delivery_attempt == 2
    c.change_invisible_duration(again[0], 30)
    c.ack(again[0])
    assert c.receive(32, 2) == []


def test_bad_lite_topic_and_wrong_parent_type_are_refused(lite_clients: LiteClients, parent: str,
                                                          broker: Standalone) -> None:
    """A lite topic name outside [a-zA-Z0-9_-] (or over 64 characters): ILLEGAL_LITE_TOPIC, at send and
    at subscribe; a lite message to a NORMAL topic: MESSAGE_PROPERTY_CONFLICT_WITH_TYPE (or the client's own
    refusal by the route's accepted types)."""
    p = lite_clients.producer(parent)
    for bad in ("a$b", "../up", "x" * 65):
        with pytest.raises(Exception, match=str(Code.ILLEGAL_LITE_TOPIC)):
            send_lite(p, parent, bad, b"bad")
    c = lite_clients.lite_simple(parent, uniq("g5lite"))
    with pytest.raises(Exception, match=str(Code.ILLEGAL_LITE_TOPIC)):
        c.subscribe_lite("bad%name")
    normal = uniq("g5normal")
    create_topic(broker.namesrv_addr, normal, queues=1)
    q = lite_clients.producer(normal)
    # Refused by the endpoint, or by the client itself once the route (NORMAL only) and the endpoint's
    # settings (validate_message_type) reached it: both are RocketMQ 5's answers, whichever comes first.
    with pytest.raises(Exception, match=f"{Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE}|{LOCAL_REFUSAL}.*message_type:LITE"):
        send_lite(q, normal, "a", b"to a normal topic")


def test_lite_push_consumer_consumes_its_lite_topics(lite_clients: LiteClients, parent: str) -> None:
    """A LitePushConsumer subscribed to one lite topic consumes its messages (acked by SUCCESS), none
    of another; a lite topic subscribed later brings its messages too."""
    p = lite_clients.producer(parent)
    want = {send_lite(p, parent, "push-1", f"p1-{i}".encode()) for i in range(3)}
    other = send_lite(p, parent, "push-2", b"p2-0")
    seen: list[tuple[str, str]] = []
    lock = threading.Lock()
    progress = threading.Condition(lock)

    class Listener(MessageListener):
        def consume(self, msg):  # noqa: ANN001, ANN201
            with progress:
                seen.append((msg.lite_topic, msg.message_id))
                progress.notify_all()
            return ConsumeResult.SUCCESS

    pc = LitePushConsumer(lite_clients.config(), uniq("g5litepush"), parent, Listener())
    lite_clients.all.append(pc)
    adopt_client_loop()
    pc.startup()
    wait_for_settings(pc)
    subscribe(pc, "push-1")

    def wait_ids(ids: set[str], timeout: float = 30.0) -> None:
        with progress:
            assert progress.wait_for(lambda: ids <= {i for _t, i in seen}, timeout), seen

    wait_ids(want)
    assert {t for t, _i in seen} == {"push-1"}
    assert other not in {i for _t, i in seen}
    subscribe(pc, "push-2")
    wait_ids({other})


def test_unacked_past_retry_max_times_goes_to_the_dead_letter_queue(lite_clients: LiteClients, parent: str,
                                                                    broker: Standalone) -> None:
    """A lite message never acked comes back once (retryMaxTimes 1), then lands in %DLQ%<group> with its
    lite topic, and is not received again."""
    group = uniq("g5litedlq")

    async def make_group() -> None:
        async with Admin(broker.namesrv_addr) as admin:
            await admin.create_group(group, retry_max_times=1)

    run_off_main(make_group())
    p = lite_clients.producer(parent)
    key = uniq("litedlq")
    m = message(parent, b"poison", keys=(key,))
    m.lite_topic = "dead-end"
    mid = p.send(m).message_id
    c = lite_clients.lite_simple(parent, group)
    subscribe(c, "dead-end")
    first = receive_until(c, 1, invisible_s=1)
    assert [x.message_id for x in first] == [mid]
    second = receive_until(c, 1, deadline_s=30, invisible_s=1)
    assert [(x.message_id, x.delivery_attempt) for x in second] == [(mid, 2)]

    found = dead_letters(broker, group, key, 30)
    assert [x.body for x in found] == [b"poison"]
    assert found[0].properties["__LITE_TOPIC"] == "dead-end"
    assert c.receive(32, 2) == []


def test_raw_sync_lite_subscription_statuses_and_forward_to_dlq(lite_clients: LiteClients, parent: str,
                                                                broker: Standalone) -> None:
    """SyncLiteSubscription on an unknown parent: TOPIC_NOT_FOUND; over the quota:
    LITE_SUBSCRIPTION_QUOTA_EXCEEDED. ForwardMessageToDeadLetterQueue of a received lite message (with its
    lite_topic) moves it to %DLQ%<group> and acks it in its LMQ."""
    meta = (("x-mq-client-id", uniq("rawclient")),)
    with grpc.insecure_channel(broker.grpc_endpoint) as channel:
        stub = MessagingServiceStub(channel)

        def sync(topic: str, names: list[str]) -> int:
            req = service_pb2.SyncLiteSubscriptionRequest(
                action=definition_pb2.LiteSubscriptionAction.COMPLETE_ADD, topic=definition_pb2.Resource(name=topic),
                group=definition_pb2.Resource(name=uniq("g5raw")), lite_topic_set=names)
            return stub.SyncLiteSubscription(req, metadata=meta, timeout=10).status.code

        assert sync(uniq("nosuch"), ["a1"]) == Code.TOPIC_NOT_FOUND
        normal = uniq("g5normal")
        create_topic(broker.namesrv_addr, normal, queues=1)
        assert sync(normal, ["a1"]) == Code.BAD_REQUEST  # not a LITE topic
        assert sync(parent, [f"t{i}" for i in range(1201)]) == Code.LITE_SUBSCRIPTION_QUOTA_EXCEEDED
        assert sync(parent, [f"t{i}" for i in range(1200)]) == Code.OK

        p = lite_clients.producer(parent)
        key = uniq("fwd")
        m = message(parent, b"forward me", keys=(key,))
        m.lite_topic = "fwd-topic"
        mid = p.send(m).message_id
        group = uniq("g5litefwd")
        c = lite_clients.lite_simple(parent, group)
        subscribe(c, "fwd-topic")
        got = receive_until(c, 1, invisible_s=1)
        assert [x.message_id for x in got] == [mid]
        resp = stub.ForwardMessageToDeadLetterQueue(service_pb2.ForwardMessageToDeadLetterQueueRequest(
            group=definition_pb2.Resource(name=group), topic=definition_pb2.Resource(name=parent),
            receipt_handle=got[0].receipt_handle, message_id=mid, delivery_attempt=1, max_delivery_attempts=16,
            lite_topic="fwd-topic"), timeout=10)
        assert resp.status.code == Code.OK, resp.status.message

    found = dead_letters(broker, group, key, 15)
    assert [x.body for x in found] == [b"forward me"]
    # acked in its LMQ: not back after its 1 s invisible time (an unacked one is, test above)
    assert receive_until(c, 1, deadline_s=6) == []


def test_lite_topics_survive_a_sigkill(tmp_path) -> None:  # noqa: ANN001
    """Lite messages acknowledged before a SIGKILL are received from their lite topics after the
    restart (crash recovery re-dispatches the CommitLog into the LMQs), and no others."""
    with Standalone(tmp_path / "data", {"mappedFileSizeCommitLog": str(64 * 1024 * 1024)}) as s:
        parent = lite_parent(s)
        cs = LiteClients(s.grpc_endpoint)
        try:
            p = cs.producer(parent)
            kept = {send_lite(p, parent, "kept", f"k{i}".encode()) for i in range(5)}
            for i in range(3):
                send_lite(p, parent, "elsewhere", f"e{i}".encode())
        finally:
            cs.close()
        s.kill()
        s.start()
        cs = LiteClients(s.grpc_endpoint)
        try:
            c = cs.lite_simple(parent, uniq("g5litecrash"))
            subscribe(c, "kept")
            got = receive_until(c, 5)
            assert {m.message_id for m in got} == kept
            assert {m.body for m in got} == {f"k{i}".encode() for i in range(5)}
        finally:
            cs.close()


def test_plain_simple_consumer_on_a_lite_parent_gets_nothing(lite_clients: LiteClients, parent: str) -> None:
    """Every receive from a LITE topic is a lite receive: a plain SimpleConsumer, which subscribes no lite
    topic, does not drain the lite topics' messages through the parent's queues."""
    p = lite_clients.producer(parent)
    send_lite(p, parent, "private", b"not for plain consumers")
    plain = lite_clients.simple_consumer(uniq("g5plain"), parent, await_s=1)
    assert plain.receive(32, 15) == []
    c = lite_clients.lite_simple(parent, uniq("g5lite"))
    subscribe(c, "private")
    assert [m.body for m in receive_until(c, 1)] == [b"not for plain consumers"]

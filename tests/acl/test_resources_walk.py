"""Every code a TidalMQ server registers is declared (remoting/protocol/requests.py) and classified for the
ACL; the ACL reads each request's topic and group from the declared subject fields, and each processor
reads nothing of a request's extFields but its declared header, for every spelling of it: a processor
reading a topic the ACL does not check (as SEND_BATCH_MESSAGE in the full names once did) fails here."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import ModuleTmp
from tidalmq.acl.permission import BROKER_ADMIN_CODES, NAMESRV_ADMIN_CODES
from tidalmq.acl.resources import request_resources
from tidalmq.broker.broker_controller import BrokerController
from tidalmq.broker.config import BrokerConfig
from tidalmq.namesrv.server import NameServer
from tidalmq.remoting.codes import RequestCode as RC
from tidalmq.remoting.command import RemotingCommand
from tidalmq.remoting.protocol.header import Field, Kind
from tidalmq.remoting.protocol.requests import REQUESTS, Acl, Server, form_of, forms, spellings
from tidalmq.remoting.transport import Connection
from tidalmq.store.config import MessageStoreConfig

# Names a processor might read a topic or a group from without declaring them: set on every request, so
# that a processor reading one shows here.
DECOYS = ("topic", "consumerGroup", "group", "producerGroup", "groupName")
# The topic and group fields processors read that no permission covers, as in RocketMQ 4.9's ACL 1.0 (any
# account may make these requests, whatever its rights: docs/acl.md, "What any account can do"). Admin
# codes are not listed: they need an admin account, whatever they name.
NOT_CHECKED: dict[int, frozenset[str]] = {code: frozenset(names) for code, names in {
    RC.SEND_MESSAGE: ("producerGroup", "defaultTopic"),
    RC.SEND_MESSAGE_V2: ("a", "c"),
    RC.SEND_BATCH_MESSAGE: ("producerGroup", "defaultTopic", "a", "c"),
    RC.UNREGISTER_CLIENT: ("producerGroup",),
    RC.CONSUMER_SEND_MSG_BACK: ("originTopic",),  # parsed, not acted on: the message is read by its offset
    RC.RECALL_MESSAGE: ("producerGroup",),  # as RocketMQ 5.3's header: only the topic is a resource
    RC.RESCHEDULE_MESSAGE: ("producerGroup",),  # as RECALL_MESSAGE: the group is only recorded (PGROUP)
    RC.END_TRANSACTION: ("producerGroup",),
    RC.QUERY_CONSUMER_OFFSET: ("consumerGroup", "topic"),
    RC.GET_MAX_OFFSET: ("topic",),
    RC.GET_MIN_OFFSET: ("topic",),
    RC.GET_EARLIEST_MSG_STORETIME: ("topic",),
    RC.SEARCH_OFFSET_BY_TIMESTAMP: ("topic",),
    RC.QUERY_CONSUME_QUEUE: ("topic", "consumerGroup"),
    RC.GET_TOPIC_STATS_INFO: ("topic",),
    RC.GET_TOPIC_CONFIG: ("topic",),
    RC.GET_CONSUME_STATS: ("consumerGroup", "topic"),
    RC.QUERY_TOPIC_CONSUME_BY_WHO: ("topic",),
    RC.QUERY_TOPICS_BY_CONSUMER: ("group",),
    RC.GET_CONSUMER_CONNECTION_LIST: ("consumerGroup",),
    RC.GET_PRODUCER_CONNECTION_LIST: ("producerGroup",),
    RC.GET_CONSUMER_RUNNING_INFO: ("consumerGroup",),
}.items()}
# Their resources are in their bodies (acl/resources.py reads them there).
BODY_CODES = {RC.HEART_BEAT, RC.BATCH_ACK_MESSAGE}


class Recording(dict[str, str]):
    """ext fields that remember which names were looked up."""

    def __init__(self, values: dict[str, str]) -> None:
        super().__init__(values)
        self.read: set[str] = set()

    def get(self, key: str, default: object = None) -> object:  # type: ignore[override]
        self.read.add(key)
        return super().get(key, default)

    def __getitem__(self, key: str) -> str:
        self.read.add(key)
        return super().__getitem__(key)

    def __contains__(self, key: object) -> bool:
        self.read.add(str(key))
        return super().__contains__(key)


def _value(f: Field) -> str:
    if f.kind is Kind.TOPIC:
        return "WalkT" + f.name
    if f.kind is Kind.GROUP:
        return "WalkG" + f.name
    if f.kind is Kind.BOOL:
        return "false"
    if f.kind in (Kind.BROKER, Kind.CLUSTER, Kind.CONFIG_KEY):
        return "walk"
    if f.kind is Kind.ADDR:
        return "127.0.0.1:1"
    return "x" if f.kind is Kind.TEXT else "0"


@pytest.fixture(scope="module")
def broker(module_tmp: ModuleTmp) -> Iterator[tuple[asyncio.AbstractEventLoop, BrokerController]]:
    root = Path(module_tmp("walk"))
    sc = MessageStoreConfig(store_path_root_dir=str(root / "store"), mapped_file_size_commit_log=4 * 1024 * 1024)
    bc = BrokerConfig(broker_name="walk-broker", listen_port=0, namesrv_addr="")
    loop = asyncio.new_event_loop()
    b = BrokerController(bc, sc, host="127.0.0.1")
    loop.run_until_complete(b.start())
    try:
        yield loop, b
    finally:
        loop.run_until_complete(b.stop())
        loop.close()


def _processor_reads(loop: asyncio.AbstractEventLoop, b: BrokerController, code: int, ext: dict[str, str]) -> set[str]:
    rec = Recording(ext)
    conn = Connection(None)
    conn.remote = ("127.0.0.1", 40000)
    cmd = RemotingCommand(code=code, ext_fields=rec, body=b"")
    async def call() -> None:  # on the broker's loop, where its processors make their tasks
        reply = b.server._processors[code](conn, cmd)
        if inspect.isawaitable(reply):
            await asyncio.wait_for(reply, 5.0)

    try:
        loop.run_until_complete(call())
    except Exception:  # noqa: S110 - what it read before failing is what counts
        pass
    return rec.read


def test_the_acl_reads_the_subjects_and_each_processor_its_header(
        broker: tuple[asyncio.AbstractEventLoop, BrokerController]) -> None:
    loop, b = broker
    walked = 0
    wrong: list[str] = []
    for code in sorted(b.server._processors):
        if code in BODY_CODES:
            continue
        for form, fields in zip(forms(code), spellings(code), strict=True):
            declared = {f.name for f in fields}
            ext = {d: "WalkD" + d for d in DECOYS if d not in declared}
            ext.update({f.name: _value(f) for f in fields})
            if code == RC.PULL_MESSAGE:
                ext.update(suspendTimeoutMillis="0", sysFlag="0")
            assert form_of(code, ext) == form, code
            subject = {f.name for f in fields if f.subject is not None}
            acl = Recording(ext)
            request_resources(RemotingCommand(code=code, ext_fields=acl))
            name = f"{RC(code).name} (spelling {form})"
            if acl.read & set(ext) != subject:
                wrong.append(f"{name}: the ACL reads {sorted(acl.read & set(ext))}, its subject is {sorted(subject)}")
            read = _processor_reads(loop, b, code, dict(ext)) & set(ext)
            if read - declared:
                wrong.append(f"{name}: the processor reads {sorted(read - declared)}, which its header does not declare")
            named = {f.name for f in fields if f.kind in (Kind.TOPIC, Kind.GROUP)} & read
            unchecked = named - subject - NOT_CHECKED.get(code, frozenset())
            if unchecked and code not in BROKER_ADMIN_CODES:
                wrong.append(f"{name}: the processor reads {sorted(unchecked)}, which no permission covers")
            walked += 1
    assert not wrong, "\n".join(wrong)
    assert walked > 40 and {RC.SEND_BATCH_MESSAGE, RC.PULL_MESSAGE, RC.POP_MESSAGE} <= set(b.server._processors)


def test_every_registered_code_is_declared_and_classified(
        broker: tuple[asyncio.AbstractEventLoop, BrokerController]) -> None:
    """Each code the broker and the NameServer register has its declaration, naming that server, and an
    ACL classification; the admin codes the ACL enforces are exactly those declared admin."""
    _, b = broker
    ns = NameServer("127.0.0.1", 0)
    for server, codes, admin in ((Server.BROKER, set(b.server._processors), BROKER_ADMIN_CODES),
                                 (Server.NAMESRV, set(ns.server._processors), NAMESRV_ADMIN_CODES)):
        undeclared = [RC(c).name for c in codes if c not in REQUESTS or server not in REQUESTS[c].servers]
        assert not undeclared, f"{server.value} registers undeclared codes: {undeclared}"
        assert {c for c in codes if REQUESTS[c].acl is Acl.ADMIN} == admin
        declared = {c for c, r in REQUESTS.items() if server in r.servers}
        assert declared == codes, f"declared for the {server.value} but not registered: {declared - codes}"
    for code, r in REQUESTS.items():
        subjects = any(f.subject is not None for form in r.header.FORMS for f in form)
        assert r.acl is (Acl.ADMIN if r.admin else Acl.BODY if code in BODY_CODES
                         else Acl.SUBJECTS if subjects else Acl.ANY), RC(code).name

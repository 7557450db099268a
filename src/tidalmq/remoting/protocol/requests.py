"""Every request code a TidalMQ server serves, declared once: its header (fields with their types and
ranges), its response header where it has one, the check of its body, who serves it, and how the ACL
classifies it (admin, or the resources its subject fields or its body name, or none).

Validation (remoting/request_check.py), the processors' parsed headers, the clients' request builders and
the ACL's resource table (acl/resources.py, acl/permission.py) are all read from ``REQUESTS``: adding a
request code touches this table, its processor and its client call.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Generic

from tidalmq.remoting.codes import RequestCode as RC
from tidalmq.remoting.protocol import bodies
from tidalmq.remoting.protocol import broker_headers as bh
from tidalmq.remoting.protocol import namesrv_headers as nh
from tidalmq.remoting.protocol.bodies import BodyCheck
from tidalmq.remoting.protocol.header import Field, H, Header, NoHeader


class Server(Enum):
    BROKER = "broker"
    NAMESRV = "namesrv"
    CLIENT = "client"  # requests a broker sends to its clients


class Acl(Enum):
    """How the ACL classifies a request (PlainAccessResource.parse)."""

    ANY = "any"  # names no resource: any known account may make it
    SUBJECTS = "subjects"  # the header's subject fields name the resources, with the access each needs
    BODY = "body"  # the body names them (HEART_BEAT, BATCH_ACK_MESSAGE): acl/resources.py reads it
    ADMIN = "admin"  # needs an admin account, whatever it names


@dataclass(frozen=True)
class Request(Generic[H]):
    code: int
    header: type[H]
    servers: frozenset[Server]
    admin: bool = False
    response: type[Header] | None = None
    body: BodyCheck | None = None
    resources_in_body: bool = False

    @property
    def acl(self) -> Acl:
        if self.admin:
            return Acl.ADMIN
        if self.resources_in_body:
            return Acl.BODY
        if any(f.subject is not None for form in self.header.FORMS for f in form):
            return Acl.SUBJECTS
        return Acl.ANY


_B, _N, _C = frozenset({Server.BROKER}), frozenset({Server.NAMESRV}), frozenset({Server.CLIENT})


def _r(code: RC, header: type[H], servers: frozenset[Server] = _B, *, admin: bool = False,
       response: type[Header] | None = None, body: BodyCheck | None = None,
       resources_in_body: bool = False) -> Request[H]:
    return Request(int(code), header, servers, admin, response, body, resources_in_body)


# ---- the broker --------------------------------------------------------------------------------------
SEND_MESSAGE = _r(RC.SEND_MESSAGE, bh.SendMessageRequestHeader, response=bh.SendMessageResponseHeader)
SEND_MESSAGE_V2 = _r(RC.SEND_MESSAGE_V2, bh.SendMessageRequestHeader, response=bh.SendMessageResponseHeader)
SEND_BATCH_MESSAGE = _r(RC.SEND_BATCH_MESSAGE, bh.SendMessageRequestHeader, response=bh.SendMessageResponseHeader)
PULL_MESSAGE = _r(RC.PULL_MESSAGE, bh.PullMessageRequestHeader, response=bh.PullMessageResponseHeader)
CONSUMER_SEND_MSG_BACK = _r(RC.CONSUMER_SEND_MSG_BACK, bh.ConsumerSendMsgBackRequestHeader)
LOCK_BATCH_MQ = _r(RC.LOCK_BATCH_MQ, NoHeader, body=bodies.lock_batch)
UNLOCK_BATCH_MQ = _r(RC.UNLOCK_BATCH_MQ, NoHeader, body=bodies.lock_batch)
INVOKE_BROKER_TO_RESET_OFFSET = _r(RC.INVOKE_BROKER_TO_RESET_OFFSET, bh.ResetOffsetRequestHeader, admin=True)
HEART_BEAT = _r(RC.HEART_BEAT, NoHeader, body=bodies.heartbeat, resources_in_body=True)
CHECK_CLIENT_CONFIG = _r(RC.CHECK_CLIENT_CONFIG, NoHeader, body=bodies.check_client_config)
UNREGISTER_CLIENT = _r(RC.UNREGISTER_CLIENT, bh.UnregisterClientRequestHeader)
GET_CONSUMER_LIST_BY_GROUP = _r(RC.GET_CONSUMER_LIST_BY_GROUP, bh.GetConsumerListByGroupRequestHeader)
QUERY_CONSUMER_OFFSET = _r(RC.QUERY_CONSUMER_OFFSET, bh.QueryConsumerOffsetRequestHeader,
                           response=bh.OffsetResponseHeader)
UPDATE_CONSUMER_OFFSET = _r(RC.UPDATE_CONSUMER_OFFSET, bh.UpdateConsumerOffsetRequestHeader)
GET_MAX_OFFSET = _r(RC.GET_MAX_OFFSET, bh.TopicQueueRequestHeader, response=bh.OffsetResponseHeader)
GET_MIN_OFFSET = _r(RC.GET_MIN_OFFSET, bh.TopicQueueRequestHeader, response=bh.OffsetResponseHeader)
SEARCH_OFFSET_BY_TIMESTAMP = _r(RC.SEARCH_OFFSET_BY_TIMESTAMP, bh.SearchOffsetRequestHeader,
                                response=bh.OffsetResponseHeader)
GET_EARLIEST_MSG_STORETIME = _r(RC.GET_EARLIEST_MSG_STORETIME, bh.TopicQueueRequestHeader,
                                response=bh.GetEarliestMsgStoretimeResponseHeader)
VIEW_MESSAGE_BY_ID = _r(RC.VIEW_MESSAGE_BY_ID, bh.ViewMessageRequestHeader)
QUERY_MESSAGE = _r(RC.QUERY_MESSAGE, bh.QueryMessageRequestHeader, response=bh.QueryMessageResponseHeader)
UPDATE_AND_CREATE_TOPIC = _r(RC.UPDATE_AND_CREATE_TOPIC, bh.CreateTopicRequestHeader, admin=True)
DELETE_TOPIC_IN_BROKER = _r(RC.DELETE_TOPIC_IN_BROKER, bh.TopicRequestHeader, admin=True)
GET_ALL_TOPIC_CONFIG = _r(RC.GET_ALL_TOPIC_CONFIG, NoHeader, admin=True)
GET_TOPIC_CONFIG = _r(RC.GET_TOPIC_CONFIG, bh.TopicRequestHeader)
UPDATE_AND_CREATE_SUBSCRIPTIONGROUP = _r(RC.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, NoHeader, admin=True,
                                         body=bodies.subscription_group)
GET_ALL_SUBSCRIPTIONGROUP_CONFIG = _r(RC.GET_ALL_SUBSCRIPTIONGROUP_CONFIG, NoHeader, admin=True)
DELETE_SUBSCRIPTIONGROUP = _r(RC.DELETE_SUBSCRIPTIONGROUP, bh.DeleteSubscriptionGroupRequestHeader, admin=True)
GET_BROKER_RUNTIME_INFO = _r(RC.GET_BROKER_RUNTIME_INFO, NoHeader)
# GET_BROKER_CONFIG names the store's paths: admin, as the writes.
GET_BROKER_CONFIG = _r(RC.GET_BROKER_CONFIG, NoHeader, admin=True)
UPDATE_BROKER_CONFIG = _r(RC.UPDATE_BROKER_CONFIG, NoHeader, admin=True)
GET_CONSUMER_CONNECTION_LIST = _r(RC.GET_CONSUMER_CONNECTION_LIST, bh.GetConsumerConnectionListRequestHeader)
GET_PRODUCER_CONNECTION_LIST = _r(RC.GET_PRODUCER_CONNECTION_LIST, bh.GetProducerConnectionListRequestHeader)
CLEAN_EXPIRED_CONSUMEQUEUE = _r(RC.CLEAN_EXPIRED_CONSUMEQUEUE, NoHeader, admin=True)
QUERY_TOPIC_CONSUME_BY_WHO = _r(RC.QUERY_TOPIC_CONSUME_BY_WHO, bh.TopicRequestHeader)
QUERY_TOPICS_BY_CONSUMER = _r(RC.QUERY_TOPICS_BY_CONSUMER, bh.QueryTopicsByConsumerRequestHeader)
TRIGGER_DELETE_FILES = _r(RC.TRIGGER_DELETE_FILES, NoHeader, admin=True)
GET_ALL_DELAY_OFFSET = _r(RC.GET_ALL_DELAY_OFFSET, NoHeader, admin=True)
GET_ALL_CONSUMER_OFFSET = _r(RC.GET_ALL_CONSUMER_OFFSET, NoHeader, admin=True)
GET_TIMER_METRICS = _r(RC.GET_TIMER_METRICS, NoHeader)
QUERY_CONSUME_QUEUE = _r(RC.QUERY_CONSUME_QUEUE, bh.QueryConsumeQueueRequestHeader)
VIEW_BROKER_STATS_DATA = _r(RC.VIEW_BROKER_STATS_DATA, bh.ViewBrokerStatsDataRequestHeader)
GET_CONSUME_STATS = _r(RC.GET_CONSUME_STATS, bh.GetConsumeStatsRequestHeader)
# Every group's offsets, as GET_ALL_CONSUMER_OFFSET.
GET_BROKE_CONSUME_STATS = _r(RC.GET_BROKE_CONSUME_STATS, bh.GetConsumeStatsInBrokerHeader, admin=True)
GET_TOPIC_STATS_INFO = _r(RC.GET_TOPIC_STATS_INFO, bh.TopicRequestHeader)
# Served by the broker, which passes it on to the consumer asked about (served by the client).
GET_CONSUMER_RUNNING_INFO = _r(RC.GET_CONSUMER_RUNNING_INFO, bh.GetConsumerRunningInfoRequestHeader,
                               _B | _C)
END_TRANSACTION = _r(RC.END_TRANSACTION, bh.EndTransactionRequestHeader)
RECALL_MESSAGE = _r(RC.RECALL_MESSAGE, bh.RecallMessageRequestHeader, response=bh.RecallMessageResponseHeader)
RESCHEDULE_MESSAGE = _r(RC.RESCHEDULE_MESSAGE, bh.RescheduleMessageRequestHeader,
                        response=bh.RescheduleMessageResponseHeader)
POP_MESSAGE = _r(RC.POP_MESSAGE, bh.PopMessageRequestHeader, response=bh.PopMessageResponseHeader)
ACK_MESSAGE = _r(RC.ACK_MESSAGE, bh.AckMessageRequestHeader)
BATCH_ACK_MESSAGE = _r(RC.BATCH_ACK_MESSAGE, NoHeader, body=bodies.batch_ack, resources_in_body=True)
CHANGE_MESSAGE_INVISIBLETIME = _r(RC.CHANGE_MESSAGE_INVISIBLETIME, bh.ChangeInvisibleTimeRequestHeader,
                                  response=bh.ChangeInvisibleTimeResponseHeader)
NOTIFICATION = _r(RC.NOTIFICATION, bh.NotificationRequestHeader, response=bh.NotificationResponseHeader)

# ---- the broker's requests to its clients ------------------------------------------------------------
NOTIFY_CONSUMER_IDS_CHANGED = _r(RC.NOTIFY_CONSUMER_IDS_CHANGED, bh.NotifyConsumerIdsChangedRequestHeader, _C)
RESET_CONSUMER_CLIENT_OFFSET = _r(RC.RESET_CONSUMER_CLIENT_OFFSET, bh.ResetOffsetRequestHeader, _C)
CHECK_TRANSACTION_STATE = _r(RC.CHECK_TRANSACTION_STATE, bh.CheckTransactionStateRequestHeader, _C)

# ---- the NameServer (RocketMQ's has no ACL: what changes routes or the KV config needs an admin) -------
REGISTER_BROKER = _r(RC.REGISTER_BROKER, nh.RegisterBrokerRequestHeader, _N, admin=True,
                     response=nh.RegisterBrokerResponseHeader, body=bodies.register_broker)
UNREGISTER_BROKER = _r(RC.UNREGISTER_BROKER, nh.BrokerIdentityRequestHeader, _N, admin=True)
# Refreshes a broker's liveness: a stranger could keep a dead broker routed.
QUERY_DATA_VERSION = _r(RC.QUERY_DATA_VERSION, nh.BrokerIdentityRequestHeader, _N, admin=True,
                        response=nh.QueryDataVersionResponseHeader, body=bodies.any_object)
GET_ROUTEINFO_BY_TOPIC = _r(RC.GET_ROUTEINFO_BY_TOPIC, nh.GetRouteInfoRequestHeader, _N)
GET_BROKER_CLUSTER_INFO = _r(RC.GET_BROKER_CLUSTER_INFO, NoHeader, _N)
GET_ALL_TOPIC_LIST_FROM_NAMESERVER = _r(RC.GET_ALL_TOPIC_LIST_FROM_NAMESERVER, NoHeader, _N)
GET_TOPICS_BY_CLUSTER = _r(RC.GET_TOPICS_BY_CLUSTER, nh.GetTopicsByClusterRequestHeader, _N)
DELETE_TOPIC_IN_NAMESRV = _r(RC.DELETE_TOPIC_IN_NAMESRV, nh.DeleteTopicFromNamesrvRequestHeader, _N, admin=True)
PUT_KV_CONFIG = _r(RC.PUT_KV_CONFIG, nh.PutKVConfigRequestHeader, _N, admin=True)
GET_KV_CONFIG = _r(RC.GET_KV_CONFIG, nh.KVConfigRequestHeader, _N, response=nh.GetKVConfigResponseHeader)
DELETE_KV_CONFIG = _r(RC.DELETE_KV_CONFIG, nh.KVConfigRequestHeader, _N, admin=True)
GET_KVLIST_BY_NAMESPACE = _r(RC.GET_KVLIST_BY_NAMESPACE, nh.GetKVListByNamespaceRequestHeader, _N)

REQUESTS: dict[int, Request[Header]] = {
    r.code: r for r in globals().copy().values() if isinstance(r, Request)
}

_SEND_CODES = frozenset((SEND_MESSAGE.code, SEND_MESSAGE_V2.code, SEND_BATCH_MESSAGE.code))
_SEND_V2, _SEND_BATCH = SEND_MESSAGE_V2.code, SEND_BATCH_MESSAGE.code
_V2_TOPIC = bh.SendMessageRequestHeader.key_of("topic", bh.SEND_V2)


def form_of(code: int, ext: Mapping[str, str]) -> int:
    """Which spelling of its header (``header.FORMS``) a request uses: SEND_MESSAGE_V2 the V2 letters, a
    SEND_BATCH_MESSAGE whichever it carries the topic in (the Java client writes the full names, the C++
    client the letters), every other code its only one. The one place that says so: the validation, the
    ACL and the send processor all ask here."""
    if code == _SEND_V2:
        return bh.SEND_V2
    if code == _SEND_BATCH and _V2_TOPIC in ext:
        return bh.SEND_V2
    return 0


def forms(code: int) -> tuple[int, ...]:
    """The spellings a request of ``code`` may come in."""
    if code == _SEND_V2:
        return (bh.SEND_V2,)
    if code == _SEND_BATCH:
        return (0, bh.SEND_V2)
    return (0,)


def admin_codes(server: Server) -> frozenset[int]:
    return frozenset(r.code for r in REQUESTS.values() if r.admin and server in r.servers)


def ext_of(code: int, ext: Header | Mapping[str, str] | None) -> dict[str, str]:
    """The extFields of a request of ``code`` a client builds: a declared header's, in the spelling the code
    is sent in (SEND_MESSAGE_V2's letters), or a copy of a mapping."""
    if ext is None:
        return {}
    if isinstance(ext, Header):
        declared = REQUESTS.get(code)
        if declared is not None and type(ext) is not declared.header:
            raise TypeError(f"request code {code} carries a {declared.header.__name__}, not a {type(ext).__name__}")
        return ext.to_ext(forms(code)[0])
    return dict(ext)


def spellings(code: int) -> tuple[tuple[Field, ...], ...]:
    """The fields of each spelling a request of ``code`` may come in, in ``forms(code)``'s order."""
    header = REQUESTS[code].header
    return tuple(header.FORMS[form] for form in forms(code))

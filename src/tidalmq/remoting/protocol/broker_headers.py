"""The broker's request and response headers, RocketMQ's ``*RequestHeader`` / ``*ResponseHeader`` classes
(org.apache.rocketmq.remoting.protocol.header), each field declared once (``header.spec``)."""

from __future__ import annotations

from tidalmq.remoting.protocol.header import Access, Header, Kind, header, spec

_T, _G, _I, _L, _X, _B = Kind.TOPIC, Kind.GROUP, Kind.INT32, Kind.INT64, Kind.TEXT, Kind.BOOL
PUB, SUB = Access.PUB, Access.SUB
TIMESTAMP_LATEST = -1  # ResetOffsetRequestHeader's timestamp for "the queue's end"


# ---- send --------------------------------------------------------------------------------------------
@header
class SendMessageRequestHeader(Header):
    """SendMessageRequestHeader; the second spelling is SendMessageRequestHeaderV2's single letters."""

    producer_group: str | None = spec("producerGroup", _G, default=None, short="a")
    topic: str = spec("topic", _T, subject=PUB, short="b")
    default_topic: str | None = spec("defaultTopic", _T, default=None, short="c")
    default_topic_queue_nums: int | None = spec("defaultTopicQueueNums", _I, default=None, short="d")
    queue_id: int = spec("queueId", _I, default=-1, short="e")
    sys_flag: int = spec("sysFlag", _I, default=0, short="f")
    born_timestamp: int = spec("bornTimestamp", _L, default=0, short="g")
    flag: int = spec("flag", _I, default=0, short="h")
    properties: str = spec("properties", _X, default="", short="i")
    reconsume_times: int = spec("reconsumeTimes", _I, default=0, short="j")
    unit_mode: bool = spec("unitMode", _B, default=False, short="k")
    max_reconsume_times: int | None = spec("maxReconsumeTimes", _I, default=None, short="l")
    # The C++ client (1.2.x, 2.x) sends batches as SEND_MESSAGE with batch="1" (a C++ bool through ostream).
    batch: bool = spec("batch", _B, default=False, short="m")
    broker_name: str | None = spec("brokerName", _X, default=None, short="n")


SEND_V2 = 1  # the form number of the V2 letters


@header
class SendMessageResponseHeader(Header):
    msg_id: str = spec("msgId", _X, default="")
    queue_id: int | None = spec("queueId", _I, default=None)
    queue_offset: int | None = spec("queueOffset", _L, default=None)
    transaction_id: str | None = spec("transactionId", _X, default=None)
    msg_region: str | None = spec("MSG_REGION", _X, default=None)
    trace_on: str | None = spec("TRACE_ON", _X, default=None)
    recall_handle: str | None = spec("recallHandle", _X, default=None)  # RocketMQ 5.3


# ---- pull and offsets --------------------------------------------------------------------------------
@header
class PullMessageRequestHeader(Header):
    consumer_group: str = spec("consumerGroup", _G, subject=SUB)
    topic: str = spec("topic", _T, subject=SUB)
    queue_id: int = spec("queueId", _I)
    queue_offset: int = spec("queueOffset", _L)
    max_msg_nums: int = spec("maxMsgNums", _I, default=32)
    sys_flag: int = spec("sysFlag", _I, default=0)
    commit_offset: int = spec("commitOffset", _L, default=0)
    suspend_timeout_millis: int = spec("suspendTimeoutMillis", _L, default=0)
    subscription: str | None = spec("subscription", _X, default=None)
    sub_version: int = spec("subVersion", _L, default=0)
    expression_type: str | None = spec("expressionType", _X, default=None)
    max_msg_bytes: int = spec("maxMsgBytes", _I, default=0)


@header
class PullMessageResponseHeader(Header):
    suggest_which_broker_id: int = spec("suggestWhichBrokerId", _L, default=0)
    next_begin_offset: int | None = spec("nextBeginOffset", _L, default=None)
    min_offset: int = spec("minOffset", _L, default=0)
    max_offset: int = spec("maxOffset", _L, default=0)


@header
class ConsumerSendMsgBackRequestHeader(Header):
    offset: int = spec("offset", _L)
    group: str = spec("group", _G, subject=SUB)
    delay_level: int = spec("delayLevel", _I, default=0)
    origin_msg_id: str | None = spec("originMsgId", _X, default=None)
    origin_topic: str | None = spec("originTopic", _T, default=None)
    unit_mode: bool = spec("unitMode", _B, default=False)
    max_reconsume_times: int | None = spec("maxReconsumeTimes", _I, default=None)


@header
class QueryConsumerOffsetRequestHeader(Header):
    consumer_group: str = spec("consumerGroup", _G)
    topic: str = spec("topic", _T)
    queue_id: int = spec("queueId", _I)


@header
class UpdateConsumerOffsetRequestHeader(Header):
    consumer_group: str = spec("consumerGroup", _G, subject=SUB)
    topic: str = spec("topic", _T, subject=SUB)
    queue_id: int = spec("queueId", _I)
    commit_offset: int = spec("commitOffset", _L)


@header
class OffsetResponseHeader(Header):
    """QueryConsumerOffset-, GetMaxOffset-, GetMinOffset- and SearchOffsetResponseHeader."""

    offset: int = spec("offset", _L, default=-1)


@header
class TopicQueueRequestHeader(Header):
    """GetMaxOffset-, GetMinOffset- and GetEarliestMsgStoretimeRequestHeader."""

    topic: str = spec("topic", _T)
    queue_id: int = spec("queueId", _I)


@header
class SearchOffsetRequestHeader(Header):
    topic: str = spec("topic", _T)
    queue_id: int = spec("queueId", _I)
    timestamp: int = spec("timestamp", _L)


@header
class GetEarliestMsgStoretimeResponseHeader(Header):
    timestamp: int = spec("timestamp", _L, default=0)


@header
class ViewMessageRequestHeader(Header):
    offset: int | None = spec("offset", _L, default=None)
    msg_id: str | None = spec("msgId", _X, default=None)  # ours: an offset message id instead of its offset


@header
class QueryMessageRequestHeader(Header):
    topic: str = spec("topic", _T, subject=SUB)
    key: str = spec("key", _X, default="")
    max_num: int = spec("maxNum", _I)
    begin_timestamp: int = spec("beginTimestamp", _L)
    end_timestamp: int = spec("endTimestamp", _L)


@header
class QueryMessageResponseHeader(Header):
    index_last_update_timestamp: int = spec("indexLastUpdateTimestamp", _L, default=0)
    index_last_update_phyoffset: int = spec("indexLastUpdatePhyoffset", _L, default=0)


# ---- clients -----------------------------------------------------------------------------------------
@header
class GetConsumerListByGroupRequestHeader(Header):
    consumer_group: str = spec("consumerGroup", _G, subject=SUB)


@header
class UnregisterClientRequestHeader(Header):
    client_id: str = spec("clientID", _X, default="")
    producer_group: str | None = spec("producerGroup", _G, default=None)
    consumer_group: str | None = spec("consumerGroup", _G, default=None, subject=SUB)


@header
class NotifyConsumerIdsChangedRequestHeader(Header):
    consumer_group: str = spec("consumerGroup", _G)


@header
class ResetOffsetRequestHeader(Header):
    """ResetOffsetRequestHeader (INVOKE_BROKER_TO_RESET_OFFSET, and RESET_CONSUMER_CLIENT_OFFSET to clients)."""

    topic: str = spec("topic", _T, default="")
    group: str = spec("group", _G)
    timestamp: int = spec("timestamp", _L, default=TIMESTAMP_LATEST)
    is_force: bool = spec("isForce", _B, default=True)


@header
class GetConsumerRunningInfoRequestHeader(Header):
    consumer_group: str = spec("consumerGroup", _G)
    client_id: str = spec("clientId", _X)
    jstack_enable: bool | None = spec("jstackEnable", _B, default=None)


@header
class CheckTransactionStateRequestHeader(Header):
    """What the broker asks a producer about a half message (server to client)."""

    topic: str | None = spec("topic", _T, default=None)
    tran_state_table_offset: int | None = spec("tranStateTableOffset", _L, default=None)
    commit_log_offset: int | None = spec("commitLogOffset", _L, default=None)
    offset_msg_id: str | None = spec("offsetMsgId", _X, default=None)
    broker_name: str | None = spec("brokerName", _X, default=None)
    msg_id: str | None = spec("msgId", _X, default=None)
    transaction_id: str | None = spec("transactionId", _X, default=None)


@header
class EndTransactionRequestHeader(Header):
    producer_group: str = spec("producerGroup", _G)
    tran_state_table_offset: int = spec("tranStateTableOffset", _L)
    commit_log_offset: int = spec("commitLogOffset", _L)
    commit_or_rollback: int = spec("commitOrRollback", _I)
    from_transaction_check: bool = spec("fromTransactionCheck", _B, default=False)
    msg_id: str | None = spec("msgId", _X, default=None)
    transaction_id: str | None = spec("transactionId", _X, default=None)


@header
class RecallMessageRequestHeader(Header):
    """RecallMessageRequestHeader (RocketMQ 5.3): what is taken back was published, hence PUB."""

    topic: str = spec("topic", _T, subject=PUB)
    producer_group: str = spec("producerGroup", _G, default="")
    recall_handle: str = spec("recallHandle", _X)
    broker_name: str | None = spec("brokerName", _X, default=None)


@header
class RescheduleMessageRequestHeader(Header):
    """RESCHEDULE_MESSAGE (TidalMQ's): a pending scheduled message of ``topic``, named by its message id (UNIQ_KEY)
    or one of its keys, delivered at ``deliverTimeMs`` instead (at or before now: at once)."""

    topic: str = spec("topic", _T, subject=PUB)
    producer_group: str = spec("producerGroup", _G, default="")
    msg_id: str | None = spec("msgId", _X, default=None)
    key: str | None = spec("key", _X, default=None)
    deliver_time_ms: int = spec("deliverTimeMs", _L)


@header
class RescheduleMessageResponseHeader(Header):
    msg_id: str | None = spec("msgId", _X, default=None)
    deliver_time_ms: int | None = spec("deliverTimeMs", _L, default=None)  # the new time
    previous_deliver_time_ms: int | None = spec("previousDeliverTimeMs", _L, default=None)


@header
class RecallMessageResponseHeader(Header):
    msg_id: str | None = spec("msgId", _X, default=None)
    msg_region: str | None = spec("MSG_REGION", _X, default=None)


# ---- admin -------------------------------------------------------------------------------------------
@header
class CreateTopicRequestHeader(Header):
    topic: str = spec("topic", _T)
    default_topic: str | None = spec("defaultTopic", _T, default=None)
    read_queue_nums: int = spec("readQueueNums", _I, default=8)
    write_queue_nums: int = spec("writeQueueNums", _I, default=8)
    perm: int = spec("perm", Kind.PERM, default=6)
    topic_filter_type: str = spec("topicFilterType", _X, default="SINGLE_TAG")
    topic_sys_flag: int = spec("topicSysFlag", _I, default=0)
    order: bool = spec("order", _B, default=False)
    attributes: str | None = spec("attributes", _X, default=None)


@header
class TopicRequestHeader(Header):
    """DeleteTopicRequestHeader, GetTopicConfigRequestHeader, QueryTopicConsumeByWhoRequestHeader,
    GetTopicStatsInfoRequestHeader: a topic alone."""

    topic: str = spec("topic", _T)


@header
class DeleteSubscriptionGroupRequestHeader(Header):
    group_name: str = spec("groupName", _G)


@header
class GetConsumerConnectionListRequestHeader(Header):
    consumer_group: str = spec("consumerGroup", _G)


@header
class GetProducerConnectionListRequestHeader(Header):
    producer_group: str = spec("producerGroup", _G)


@header
class QueryTopicsByConsumerRequestHeader(Header):
    group: str = spec("group", _G)


@header
class GetConsumeStatsRequestHeader(Header):
    consumer_group: str = spec("consumerGroup", _G)
    topic: str | None = spec("topic", _T, default=None)


@header
class GetConsumeStatsInBrokerHeader(Header):
    is_order: bool = spec("isOrder", _B, default=False)


@header
class ViewBrokerStatsDataRequestHeader(Header):
    stats_name: str = spec("statsName", _X)
    stats_key: str = spec("statsKey", _X)


@header
class QueryConsumeQueueRequestHeader(Header):
    topic: str = spec("topic", _T)
    queue_id: int = spec("queueId", _I)
    index: int = spec("index", _L, default=0)
    count: int = spec("count", _I, default=32)
    consumer_group: str | None = spec("consumerGroup", _G, default=None)


# ---- pop (RocketMQ 5) --------------------------------------------------------------------------------
@header
class PopMessageRequestHeader(Header):
    """queueId -1 pops every queue."""

    consumer_group: str = spec("consumerGroup", _G, subject=SUB)
    topic: str = spec("topic", _T, subject=SUB)
    queue_id: int = spec("queueId", _I)
    max_msg_nums: int = spec("maxMsgNums", _I)
    invisible_time: int = spec("invisibleTime", _L)
    poll_time: int = spec("pollTime", _L)
    born_time: int = spec("bornTime", _L)
    init_mode: int = spec("initMode", _I)
    exp_type: str = spec("expType", _X, default="TAG")
    exp: str = spec("exp", _X, default="*")
    order: bool = spec("order", _B, default=False)


@header
class PopMessageResponseHeader(Header):
    pop_time: int = spec("popTime", _L, default=0)
    invisible_time: int = spec("invisibleTime", _L, default=0)
    revive_qid: int = spec("reviveQid", _I, default=0)
    rest_num: int = spec("restNum", _L, default=0)
    start_offset_info: str | None = spec("startOffsetInfo", _X, default=None)
    msg_offset_info: str | None = spec("msgOffsetInfo", _X, default=None)
    order_count_info: str | None = spec("orderCountInfo", _X, default=None)


@header
class AckMessageRequestHeader(Header):
    consumer_group: str = spec("consumerGroup", _G, subject=SUB)
    topic: str = spec("topic", _T, subject=SUB)
    queue_id: int = spec("queueId", _I)
    extra_info: str = spec("extraInfo", _X)
    offset: int = spec("offset", _L)


@header
class ChangeInvisibleTimeRequestHeader(Header):
    consumer_group: str = spec("consumerGroup", _G, subject=SUB)
    topic: str = spec("topic", _T, subject=SUB)
    queue_id: int = spec("queueId", _I)
    extra_info: str = spec("extraInfo", _X)
    offset: int = spec("offset", _L)
    invisible_time: int = spec("invisibleTime", _L)


@header
class ChangeInvisibleTimeResponseHeader(Header):
    pop_time: int = spec("popTime", _L, default=0)
    invisible_time: int = spec("invisibleTime", _L, default=0)
    revive_qid: int = spec("reviveQid", _I, default=0)


@header
class NotificationRequestHeader(Header):
    consumer_group: str = spec("consumerGroup", _G, subject=SUB)
    topic: str = spec("topic", _T, subject=SUB)
    queue_id: int = spec("queueId", _I)
    poll_time: int = spec("pollTime", _L)
    born_time: int = spec("bornTime", _L)
    order: bool = spec("order", _B, default=False)


@header
class NotificationResponseHeader(Header):
    has_msg: bool = spec("hasMsg", _B, default=False)
    polling_full: bool = spec("pollingFull", _B, default=False)

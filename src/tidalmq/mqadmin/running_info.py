"""A consumer's ConsumerRunningInfo (the JSON a Java or TidalMQ client answers GET_CONSUMER_RUNNING_INFO
with) as RocketMQ's tools print it: ``formatString`` and the group analysis of consumerStatus
(ConsumerRunningInfo.analyzeSubscription / analyzeProcessQueue)."""

from __future__ import annotations

import time
from typing import Any

from tidalmq.common import fastjson

_PUSH = "CONSUME_PASSIVELY"
_START_GRACE_MS = 2 * 60 * 1000  # RocketMQ compares subscriptions of consumers started over two minutes ago
_BLOCKED_MS = 60 * 1000


def human_ms(ms: int) -> str:
    """UtilAll.timeMillisToHumanString: yyyyMMddHHmmssSSS, local time."""
    return time.strftime("%Y%m%d%H%M%S", time.localtime(ms / 1000)) + f"{ms % 1000:03d}"


def _java(v: object) -> str:
    """A JSON value as Java's toString writes it (booleans lower case)."""
    if isinstance(v, bool):
        return str(v).lower()
    return str(v)


def queues(table: dict | None) -> list[tuple[tuple[str, str, int], dict]]:
    """A TreeMap<MessageQueue, …> as JSON: its entries in MessageQueue order (topic, broker, queue id)."""
    out = []
    for key, value in (table or {}).items():
        mq = fastjson.loads(key) if isinstance(key, str) else key
        out.append(((str(mq["topic"]), str(mq["brokerName"]), int(mq["queueId"])), value or {}))
    return sorted(out, key=lambda e: e[0])


def _subscriptions(info: dict) -> list[dict]:
    # TreeSet<SubscriptionData>: ordered by "topic@subString"
    return sorted(info.get("subscriptionSet") or [], key=lambda s: f"{s.get('topic')}@{s.get('subString')}")


def _pq_text(pq: dict) -> str:
    g = pq.get
    return (f"ProcessQueueInfo [commitOffset={g('commitOffset', 0)}, cachedMsgMinOffset={g('cachedMsgMinOffset', 0)}, "
            f"cachedMsgMaxOffset={g('cachedMsgMaxOffset', 0)}, cachedMsgCount={g('cachedMsgCount', 0)}, "
            f"cachedMsgSizeInMiB={g('cachedMsgSizeInMiB', 0)}, transactionMsgMinOffset={g('transactionMsgMinOffset', 0)}, "
            f"transactionMsgMaxOffset={g('transactionMsgMaxOffset', 0)}, "
            f"transactionMsgCount={g('transactionMsgCount', 0)}, locked={_java(g('locked', False))}, "
            f"tryUnlockTimes={g('tryUnlockTimes', 0)}, lastLockTimestamp={human_ms(int(g('lastLockTimestamp', 0)))}, "
            f"droped={_java(g('droped', False))}, lastPullTimestamp={human_ms(int(g('lastPullTimestamp', 0)))}, "
            f"lastConsumeTimestamp={human_ms(int(g('lastConsumeTimestamp', 0)))}]")


def format_running_info(info: dict) -> str:
    """ConsumerRunningInfo.formatString."""
    out = ["#Consumer Properties#\n"]
    out += [f"{k:<40}: {_java(v)}\n" for k, v in (info.get("properties") or {}).items()]
    out.append("\n\n#Consumer Subscription#\n")
    for i, s in enumerate(_subscriptions(info), 1):
        out.append(f"{i:03d} Topic: {s.get('topic', ''):<40} ClassFilter: {_java(s.get('classFilterMode', False)):<8} "
                   f"SubExpression: {s.get('subString', '')}\n")
    mqs = queues(info.get("mqTable"))
    out.append("\n\n#Consumer Offset#\n")
    out.append(f"{'#Topic':<64}  {'#Broker Name':<32}  {'#QID':<4}  {'#Consumer Offset':<20}\n")
    out += [f"{t:<32}  {b:<32}  {q:<4}  {int(pq.get('commitOffset', 0)):<20}\n" for (t, b, q), pq in mqs]
    out.append("\n\n#Consumer MQ Detail#\n")
    out.append(f"{'#Topic':<64}  {'#Broker Name':<32}  {'#QID':<4}  {'#ProcessQueueInfo':<20}\n")
    out += [f"{t:<64}  {b:<32}  {q:<4}  {_pq_text(pq)}\n" for (t, b, q), pq in mqs]
    out.append("\n\n#Consumer Pop Detail#\n")
    out.append(f"{'#Topic':<32}  {'#Broker Name':<32}  {'#QID':<4}  {'#ProcessQueueInfo':<20}\n")
    for (t, b, q), pq in queues(info.get("mqPopTable")):
        out.append(f"{t:<32}  {b:<32}  {q:<4}  PopProcessQueueInfo [waitAckCount:{pq.get('waitAckCount', 0)}, "
                   f"droped:{_java(pq.get('droped', False))}, lastPopTimestamp:{pq.get('lastPopTimestamp', 0)}]\n")
    out.append("\n\n#Consumer RT&TPS#\n")
    out.append(f"{'#Topic':<64}  {'#Pull RT':>14} {'#Pull TPS':>14} {'#Consume RT':>14} {'#ConsumeOK TPS':>14} "
               f"{'#ConsumeFailed TPS':>18} {'#ConsumeFailedMsgsInHour':>25}\n")
    for topic, st in sorted((info.get("statusTable") or {}).items()):
        out.append(f"{topic:<32}  {float(st.get('pullRT', 0)):14.2f} {float(st.get('pullTPS', 0)):14.2f} "
                   f"{float(st.get('consumeRT', 0)):14.2f} {float(st.get('consumeOKTPS', 0)):14.2f} "
                   f"{float(st.get('consumeFailedTPS', 0)):18.2f} {int(st.get('consumeFailedMsgs', 0)):25d}\n")
    if "userConsumerInfo" not in info or info["userConsumerInfo"] is not None:  # a TreeMap unless sent null
        out.append("\n\n#User Consume Info#\n")
        out += [f"{k:<40}: {v}\n" for k, v in sorted((info.get("userConsumerInfo") or {}).items())]
    if info.get("jstack") is not None:
        out.append("\n\n#Consumer jstack#\n")
        out.append(str(info["jstack"]))
    return "".join(out)


def _prop(info: dict, key: str) -> Any:
    return (info.get("properties") or {}).get(key)


def is_push(info: dict) -> bool:
    return _prop(info, "PROP_CONSUME_TYPE") == _PUSH


def same_subscription(infos: dict[str, dict]) -> bool:
    """ConsumerRunningInfo.analyzeSubscription over clientId -> info (in clientId order): push consumers
    started over two minutes ago must all subscribe alike."""
    first = infos[min(infos)]
    started = int(_prop(first, "PROP_CONSUMER_START_TIMESTAMP") or 0)
    if not (is_push(first) and time.time() * 1000 - started > _START_GRACE_MS):
        return True

    def subs(info: dict) -> list[tuple[str, str]]:
        return [(str(s.get("topic")), str(s.get("subString"))) for s in _subscriptions(info)]

    return all(subs(i) == subs(first) for i in infos.values())


def process_queue_warnings(client_id: str, info: dict) -> str:
    """ConsumerRunningInfo.analyzeProcessQueue: the queues an orderly consumer cannot lock, and those a
    concurrent one holds messages of without consuming for a minute."""
    if not is_push(info):
        return ""
    orderly = str(_prop(info, "PROP_CONSUMEORDERLY")).lower() == "true"
    now = int(time.time() * 1000)
    out = []
    for (t, b, q), pq in queues(info.get("mqTable")):
        mq = f"MessageQueue [topic={t}, brokerName={b}, queueId={q}]"
        if orderly:
            if not pq.get("locked"):
                out.append(f"{client_id} {mq} can't lock for a while, {now - int(pq.get('lastLockTimestamp', 0))}ms\n")
            elif pq.get("droped") and int(pq.get("tryUnlockTimes", 0)) > 0:
                out.append(f"{client_id} {mq} unlock {pq.get('tryUnlockTimes')} times, still failed\n")
        else:
            idle = now - int(pq.get("lastConsumeTimestamp", 0))
            if idle > _BLOCKED_MS and int(pq.get("cachedMsgCount", 0)) > 0:
                out.append(f"{client_id} {mq} can't consume for a while, maybe blocked, {idle}ms\n")
    return "".join(out)

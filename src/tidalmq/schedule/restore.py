"""Turning a parked scheduled message back into a message of its real topic (messageTimeup)."""

from __future__ import annotations

from tidalmq.common import message as mc
from tidalmq.common.msgid import host_bytes
from tidalmq.common.record import StoredMessage, encode_record

# Properties that only describe the parking, dropped when the message is delivered.
PARKING_PROPERTIES = (
    mc.DELAY,
    mc.TIMER_DELIVER_MS,
    mc.TIMER_DELAY_SEC,
    mc.TIMER_DELAY_MS,
    mc.TIMER_OUT_MS,
    mc.TIMER_ROLL_TIMES,
)


def restore_record(msg: StoredMessage, extra_properties: dict[str, str] | None = None) -> tuple[str, int, bytearray]:
    """(real topic, real queue id, record to append) for a message parked in a schedule topic.

    Keeps body, flag, keys, tags, UNIQ_KEY, user properties, born host/time and reconsume times;
    REAL_TOPIC and REAL_QID stay, as RocketMQ keeps them, so a consumer can tell it was scheduled.
    """
    props = dict(msg.properties)
    topic = props.get(mc.REAL_TOPIC)
    if not topic:
        raise ValueError(f"scheduled message at {msg.commit_log_offset} has no {mc.REAL_TOPIC}")
    try:
        queue_id = int(props.get(mc.REAL_QID, "0"))
    except ValueError:
        queue_id = 0
    for key in PARKING_PROPERTIES:
        props.pop(key, None)
    if extra_properties:
        props.update(extra_properties)
    record = encode_record(
        topic=topic,
        queue_id=queue_id,
        body=msg.body,
        properties=props,
        flag=msg.flag,
        sysflag=msg.sysflag,
        born_timestamp=msg.born_timestamp,
        born_host=host_bytes(msg.born_host[0]),
        born_port=msg.born_host[1],
        store_host=msg.store_host_bytes,
        store_port=msg.store_host[1],
        reconsume_times=msg.reconsume_times,
        prepared_transaction_offset=msg.prepared_transaction_offset,
        body_crc=msg.body_crc,
    )
    return topic, queue_id, record

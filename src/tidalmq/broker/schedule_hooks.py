"""Send-path rewrites for scheduled messages: delay levels park a message in SCHEDULE_TOPIC_XXXX
(RocketMQ 4), timer properties in rmq_sys_wheel_timer (RocketMQ 5)."""

from __future__ import annotations

from tidalmq.broker.processors.send import InnerMessage, SendError
from tidalmq.common import message as mc
from tidalmq.common import sysflag as sf
from tidalmq.common.naming import SCHEDULE_TOPIC
from tidalmq.remoting.codes import ResponseCode


def parse_delay_level(text: str) -> int:
    try:
        level = int(text.strip())
    except ValueError:
        raise SendError(ResponseCode.MESSAGE_ILLEGAL, f"the DELAY property must be an integer level, got {text!r}") from None
    if level < 0:
        raise SendError(ResponseCode.MESSAGE_ILLEGAL, f"the DELAY property must not be negative, got {level}")
    return level


class DelayLevelRewrite:
    """A message with ``DELAY`` = level > 0 goes to SCHEDULE_TOPIC_XXXX, queue level − 1, its real
    topic and queue kept in REAL_TOPIC / REAL_QID; a level above the maximum counts as the maximum."""

    def __init__(self, max_level: int) -> None:
        self.max_level = max_level

    def __call__(self, msg: InnerMessage, header: dict[str, str]) -> None:
        text = msg.get_property(mc.DELAY)
        if text is None:
            return
        ttype = sf.transaction_type(msg.sysflag)
        if ttype not in (sf.TRANSACTION_NOT_TYPE, sf.TRANSACTION_COMMIT_TYPE):
            return  # a half message is delayed when it is committed, not now (RocketMQ's rule)
        level = parse_delay_level(text)
        if level == 0 or self.max_level == 0:
            return
        level = min(level, self.max_level)
        props = msg.properties
        props[mc.REAL_TOPIC] = msg.topic
        props[mc.REAL_QID] = str(msg.queue_id)
        props[mc.DELAY] = str(level)
        msg.topic = SCHEDULE_TOPIC
        msg.queue_id = level - 1

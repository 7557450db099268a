"""Scheduled delivery: the persistent timer index (RocketMQ 5's timing wheel) for arbitrary delivery times.

Pure and synchronous: the store indexes (deliver time, CommitLog offset, size, uniq-key hash) records and hands
back the ones that fell due; reading and re-storing message bodies is the caller's business.
"""

from tidalmq.common.naming import TIMER_TOPIC
from tidalmq.schedule.entries import ENTRY_DTYPE, make_entries, uniq_hash
from tidalmq.schedule.timer_checkpoint import TimerCheckpoint
from tidalmq.schedule.timer_log import MAGIC_DELETE, MAGIC_ROLL, TimerLog
from tidalmq.schedule.timer_store import EnqueueResult, TimerStore
from tidalmq.schedule.timer_wheel import TimerWheel

__all__ = [
    "ENTRY_DTYPE",
    "MAGIC_DELETE",
    "MAGIC_ROLL",
    "TIMER_TOPIC",
    "EnqueueResult",
    "TimerCheckpoint",
    "TimerLog",
    "TimerStore",
    "TimerWheel",
    "make_entries",
    "uniq_hash",
]

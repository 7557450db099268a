"""``messageDelayLevel`` changed while the broker runs (UPDATE_BROKER_CONFIG on a master, the metadata sync
on a slave): RocketMQ reads it at start only.

Messages already parked keep the deliver time they were given: DelayLevelRewrite writes it into each
(TIMER_OUT_MS) and the ConsumeQueue's tag is read from there, so only messages sent from now on use the new
table. What a new table may not do is make a level's queue disorderly: a level is one FIFO queue, delivered
from its head, so a shorter delay for a level whose queue holds messages due later than ``now + new delay``
would have the new messages fall due before the ones queued ahead of them, and wait behind them. Such a table
is refused, naming the level and until when it is held. A level the new table drops is drained at its old
delay (ScheduleMessageService.draining); a level above the new maximum is sent at the maximum, as always.
"""

from __future__ import annotations

import datetime
import logging
import time
from collections.abc import Callable
from pathlib import Path

from tidalmq.broker.live_config import persist
from tidalmq.broker.schedule.hooks import DelayLevelRewrite
from tidalmq.common.naming import SCHEDULE_TOPIC
from tidalmq.schedule.delay_level import ScheduleMessageService
from tidalmq.store.api import MessageStore
from tidalmq.store.config import MessageStoreConfig, parse_delay_levels

log = logging.getLogger(__name__)

KEY = "messageDelayLevel"


def _ms_now() -> int:
    return time.time_ns() // 1_000_000


def _at(ms: int) -> str:
    return datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC).isoformat(timespec="milliseconds")


def level_text(ms: int) -> str:
    """A delay in the table's own units: the largest that divides it (``90s``, ``2h``, ``1d``)."""
    for unit, size in (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1000)):
        if ms % size == 0:
            return f"{ms // size}{unit}"
    return f"{ms}ms"


class DelayLevelTable:
    def __init__(self, store: MessageStore, store_config: MessageStoreConfig, rewrite: DelayLevelRewrite,
                 service: ScheduleMessageService, clock: Callable[[], int] = _ms_now) -> None:
        self.store, self.store_config, self.rewrite, self.service = store, store_config, rewrite, service
        self.clock = clock

    @property
    def text(self) -> str:
        return self.store_config.message_delay_level

    def latest_deliver_ms(self, level: int) -> int | None:
        """The latest deliver time among the level's messages not yet delivered, as far as known: the ones
        the rewrite gave this run (some maybe not in the ConsumeQueue yet), the last one in its queue."""
        best = self.rewrite.latest.get(level)
        qid = level - 1
        if self.store.has_queue(SCHEDULE_TOPIC, qid):
            rng = self.store.queue_range(SCHEDULE_TOPIC, qid)
            if rng.max_offset > max(self.service.offsets.get(level, 0), rng.min_offset):
                tail = self.store.read_queue(SCHEDULE_TOPIC, qid, rng.max_offset - 1, 1)
                if len(tail):
                    last = int(tail.tags_codes[-1])
                    best = last if best is None else max(best, last)
        return best

    def refusal(self, text: str) -> str | None:
        """Why the table ``text`` (valid) cannot replace the running one now, or None."""
        levels = parse_delay_levels(text)
        now = self.clock()
        walked = self.service.walked
        for level, delay in sorted(levels.items()):
            old = walked.get(level)
            if old is not None and delay >= old:
                continue  # new messages fall due after the ones pending
            latest = self.latest_deliver_ms(level)
            if latest is not None and latest > now + delay:
                was = f" ({level_text(old)})" if old is not None else ""
                return (f"{KEY} refused: delay level {level}{was} holds messages due until {_at(latest)}; at "
                        f"{level_text(delay)} a new level-{level} message would fall due before them but wait behind "
                        f"them in the level's queue. Change it after {_at(latest - delay)}, or add "
                        f"{level_text(delay)} as a new level")
        return None

    def apply(self, text: str) -> None:
        """Use the table ``text`` (checked) for every message sent from now on."""
        levels = parse_delay_levels(text)
        self.store_config.message_delay_level = text
        self.rewrite.set_levels(levels)
        self.service.set_levels(levels)
        log.info("%s is now %r", KEY, text)

    def adopt(self, text: str, config_file: Path | None) -> bool:
        """A slave taking its master's table (the metadata sync): applied and written to the config file as
        the master's update was; nothing is checked (a slave delivers nothing). True when it changed."""
        if not text or text == self.text:
            return False
        parse_delay_levels(text)  # ValueError for a table the master should never have had
        self.apply(text)
        if config_file is not None:
            persist(config_file, {KEY: text})
        return True

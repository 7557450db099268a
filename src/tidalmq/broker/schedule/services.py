"""ScheduleServices: the broker's scheduled delivery in one part that owns its state.

RocketMQ 4's delay levels (ScheduleMessageService) and RocketMQ 5's timer (TimerMessageService in the
broker's process, or the TimerProcess beside it), their stats, the send-path rewrites that park messages
for them (hooks.py), the lookup a timer cancel awaits, and their order of load, start and shutdown.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from tidalmq.broker.message import InnerMessage
from tidalmq.broker.schedule.child import EarlyChild
from tidalmq.broker.schedule.delay_table import DelayLevelTable
from tidalmq.broker.schedule.hooks import DelayLevelRewrite, TimerRewrite
from tidalmq.broker.schedule.timer_process import TimerProcess
from tidalmq.common.fileutil import is_disk_full
from tidalmq.schedule.delay_level import ScheduleMessageService
from tidalmq.schedule.reschedule import DelayMoves, ScheduleTarget, find_schedule_target
from tidalmq.schedule.stats import ScheduleStats
from tidalmq.schedule.timer_service import (
    CancelTarget,
    TimerMessageService,
    check_precision,
    find_cancel_target,
)
from tidalmq.schedule.timer_takeover import mark_replica
from tidalmq.store.api import MessageStore
from tidalmq.store.async_face import StoreFace
from tidalmq.store.config import MessageStoreConfig, parse_delay_levels

log = logging.getLogger(__name__)

# How long a timer cancel waits for its target to be indexed (a cancel sent right after its target).
CANCEL_INDEX_WAIT_S = 0.5


class ScheduleServices:
    def __init__(self, store: MessageStore, store_config: MessageStoreConfig, cfg_dir: Path,
                 early: EarlyChild | None = None) -> None:
        """``early``: the schedule process the command started early (child.start_early), adopted by the
        TimerProcess, else ended."""
        sc = store_config
        self.store = store
        self.store_face = StoreFace(store)
        self.store_path_root_dir = sc.store_path_root_dir
        self.timer_max_delay_ms = sc.timer_max_delay_sec * 1000
        # RocketMQ 4 delay levels.
        self.schedule_stats = ScheduleStats()
        levels = parse_delay_levels(sc.message_delay_level)
        # Delay-level messages a reschedule replaced (schedule/reschedule.py), skipped by their level.
        self.delay_moves = DelayMoves(cfg_dir / "delayReschedule.json")
        self.schedule = ScheduleMessageService(store, levels, cfg_dir / "delayOffset.json", self.schedule_stats,
                                               moves=self.delay_moves)
        # RocketMQ 5 timer messages: arbitrary delivery time and cancel, in <storePathRootDir>/timerwheel, timerlog/.
        self.timer_stats = ScheduleStats()
        self.timer: TimerMessageService | TimerProcess | None = None
        check_precision(sc.timer_precision_ms)
        if sc.timer_wheel_enable and sc.timer_process_enable:
            self.timer = TimerProcess(store, sc, early=early)
            early = None
        elif sc.timer_wheel_enable:
            self.timer = TimerMessageService(store, Path(sc.store_path_root_dir), precision_ms=sc.timer_precision_ms,
                                             max_delay_ms=self.timer_max_delay_ms, stats=self.timer_stats)
        if early is not None:  # no schedule process here after all
            early.discard()
        self.timer_rewrite = TimerRewrite(self.timer_max_delay_ms, sc.timer_precision_ms,
                                          lookup=self._lookup_cancel, enabled=sc.timer_wheel_enable)
        delay_rewrite = DelayLevelRewrite(levels)
        self.delay_table = DelayLevelTable(store, sc, delay_rewrite, self.schedule)  # messageDelayLevel, live
        # The send path's rewrites, in their order (after the transaction hook).
        self.rewrite_hooks: list[Callable[[InnerMessage], None]] = [delay_rewrite, self.timer_rewrite]

    # lifecycle --------------------------------------------------------------------------------
    def attach_loop(self, loop: asyncio.AbstractEventLoop) -> None:
        if isinstance(self.timer, TimerProcess):
            self.timer.attach_loop(loop)  # arrivals told to the schedule process from the loop

    def prestart(self) -> None:
        """Before the store's recovery, on a master: the schedule process's start-up overlaps it."""
        if isinstance(self.timer, TimerProcess):
            self.timer.prestart()

    def load(self, is_slave: bool) -> None:
        """After the store's load, before its start."""
        self.schedule.load()
        self.store.add_arrival_listener(self.schedule.on_arrival)
        if is_slave:
            # A slave delivers no scheduled message and keeps no timer state: its CommitLog is the master's
            # copy (RocketMQ starts these services on masters only). Promoted, its timer service rebuilds
            # the wheel from that copy (schedule/timer_takeover.py).
            mark_replica(self.store_path_root_dir)
        else:
            self.load_timer()

    def load_timer(self) -> None:
        if self.timer is None:
            return
        try:
            self.timer.load()
        except OSError as e:
            if not is_disk_full(e):
                raise
            # Its load writes its checkpoint. Timer messages still go to the timer topic in the
            # CommitLog, and a start with space delivers them from there.
            log.error("timer service not started, the disk is full (%s): timer messages are kept and "
                      "delivered after a restart with space", e)
            self.timer = None

    def start(self) -> None:
        """On a master, once the store runs (or a promoted slave's, once it takes puts)."""
        self.schedule.start()
        if self.timer is not None:
            self.store.add_arrival_listener(self.timer.on_arrival)
            self.timer.start()

    def shutdown_steps(self) -> list[tuple[str, Callable[[], object]]]:
        steps: list[tuple[str, Callable[[], object]]] = [("delay-level service", self.schedule.shutdown)]
        if self.timer is not None:
            steps.append(("timer service", self.timer.shutdown))
        return steps

    # the send path ----------------------------------------------------------------------------
    def cancel_lookup(self, msg: InnerMessage) -> Awaitable[CancelTarget] | None:
        """For a timer cancel (TIMER_DEL_UNIQKEY): the lookup of its target, to await before the rewrite
        hooks run; None for any other message."""
        key = self.timer_rewrite.cancel_of(msg)
        return None if key is None else self._lookup_cancel(*key)

    async def _lookup_cancel(self, topic: str, uniq: str) -> CancelTarget:
        store, face = self.store, self.store_face
        if store.has_index:
            # A cancel sent right after its target: let reput index the target first (usually done).
            await face.wait_reput(store.max_phy_offset, CANCEL_INDEX_WAIT_S)
        return await face.run(find_cancel_target, store, topic, uniq, int(time.time() * 1000))

    async def lookup_schedule_target(self, topic: str, uniq: str | None, key: str | None) -> ScheduleTarget:
        """A reschedule's target (by uniq key or key), looked up off the loop once reput has caught up."""
        store, face = self.store, self.store_face
        await face.wait_reput(store.max_phy_offset, CANCEL_INDEX_WAIT_S)
        return await face.run(find_schedule_target, store, topic, uniq, key, int(time.time() * 1000),
                              self.schedule.walked, dict(self.schedule.offsets))

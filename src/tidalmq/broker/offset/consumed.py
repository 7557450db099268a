"""How far every reader has consumed the CommitLog: the bound the store's forcible cleanup respects.

Over ``diskSpaceCleanForciblyRatio`` (and without ``cleanFileForciblyEnable``) the store deletes an
unexpired CommitLog file only if it ends at or below this bound. The rule, per (topic, queue) holding
messages:

- the readers of a topic are the groups that committed an offset for it or subscribe to it now;
  each reader has consumed the queue up to its committed offset (none committed: nothing);
- ``SCHEDULE_TOPIC_XXXX`` is read by the delay-level service, at its own offsets (delayOffset.json);
- a topic nobody reads (a new topic, a dead-letter queue, the timer and transaction topics) counts as
  not consumed at all: only ``fileReservedTime`` removes it.

The bound is the smallest CommitLog offset of a message some reader has not consumed (the end of the
CommitLog when every queue is consumed). One ConsumeQueue lookup per queue: cheap enough for the
CleanService's period.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tidalmq.common import naming as nm

if TYPE_CHECKING:
    from tidalmq.broker.client.consumer_manager import ConsumerManager
    from tidalmq.broker.offset.consumer_offset import ConsumerOffsetManager
    from tidalmq.schedule.delay_level import ScheduleMessageService
    from tidalmq.store.api import MessageStore


def consumed_commit_log_offset(store: MessageStore, offsets: ConsumerOffsetManager, consumers: ConsumerManager,
                               schedule: ScheduleMessageService) -> tuple[int, str]:
    """(bound, which queue and reader hold it back, for the operator)."""
    bound = store.max_phy_offset
    holder = ""
    for topic, queue_ids in store.topics_and_queues().items():
        readers = _readers(offsets, consumers, schedule, topic)
        for qid in queue_ids:
            low = store.get_min_offset_in_queue(topic, qid)
            high = store.get_max_offset_in_queue(topic, qid)
            if high <= low:
                continue
            consumed, reader = high, ""
            for name, offset in readers(qid):
                if offset < consumed:
                    consumed, reader = offset, name
            if not readers.names:
                consumed, reader = low, "no consumer group"
            if consumed >= high:
                continue
            phys = store.get_commit_log_offset_in_queue(topic, qid, max(consumed, low))
            if phys < bound:
                bound, holder = phys, f"{topic} queue {qid} at offset {max(consumed, low)}, {reader}"
    return bound, holder


class _Readers:
    def __init__(self, names: list[str], offset_of: dict[str, dict[int, int]]) -> None:
        self.names = names
        self._offset_of = offset_of

    def __call__(self, qid: int) -> list[tuple[str, int]]:
        return [(f"group {g}", self._offset_of[g].get(qid, -1)) for g in self.names]


def _readers(offsets: ConsumerOffsetManager, consumers: ConsumerManager, schedule: ScheduleMessageService,
             topic: str) -> _Readers:
    if topic == nm.SCHEDULE_TOPIC:
        # Queue id = delay level - 1; the service keeps its next offset per level.
        by_queue = {lvl - 1: off for lvl, off in schedule.offsets.items()}
        return _Readers(["delay-level service"], {"delay-level service": by_queue})
    groups = sorted(offsets.groups_of_topic(topic) | set(consumers.groups_subscribing(topic)))
    return _Readers(groups, {g: offsets.offsets_of(g, topic) for g in groups})

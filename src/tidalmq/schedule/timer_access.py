"""What the timer service uses of the store and of the broker: the few store calls it makes (the broker's
MessageStore, or the schedule process's follower of it), and puts answered later (the schedule process's
channel to the broker).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from tidalmq.common.record import StoredMessage
from tidalmq.store.results import AppendResult, PutRequest, QueueEntries, QueueRange


class TimerStoreAccess(Protocol):
    """What the service reads and writes of the store: the MessageStore (store/api.py) in the broker's
    process, a StoreFollower (store/follower.py) in the schedule process."""

    @property
    def max_phy_offset(self) -> int: ...

    @property
    def has_index(self) -> bool: ...

    def has_queue(self, topic: str, queue_id: int) -> bool: ...

    def queue_range(self, topic: str, queue_id: int) -> QueueRange: ...

    def queue_offset_at_or_after(self, topic: str, queue_id: int, commit_log_offset: int) -> int: ...

    def read_queue(self, topic: str, queue_id: int, offset: int, max_n: int) -> QueueEntries: ...

    def select_one_message_by_offset(self, commit_log_offset: int, size: int | None = None) -> memoryview | None: ...

    def look_message_by_offset(self, commit_log_offset: int, size: int | None = None) -> StoredMessage | None: ...

    def put_messages(self, requests: Sequence[PutRequest]) -> list[AppendResult]: ...

    def query_message(self, topic: str, key: str, max_num: int, begin_ts: int, end_ts: int) -> list[memoryview]: ...

    def wait_reput(self, offset: int, timeout: float) -> bool: ...


class PipelinedPuts(Protocol):
    """Puts whose answers come later, in the order they were made (schedule/timer_host.BrokerChannel)."""

    def submit_put(self, requests: Sequence[PutRequest]) -> Callable[[], list[AppendResult]]:
        """Send the put now; the returned function waits for its answer."""
        ...

    def resume(self) -> None:
        """After a failed put the broker refuses the following ones (nothing stored) until this."""
        ...

"""ConsumeMessageService: what the concurrent and the orderly consume services share — the group, its
listener, the send-back of failed messages, the offset store and the message model."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from tidalmq.client.message import MessageModel

if TYPE_CHECKING:
    from tidalmq.client.offset_store import OffsetStore
    from tidalmq.client.push.consume_concurrently import MessageSender
    from tidalmq.client.push.listener import ListenerRunner


class ConsumeMessageService:
    def __init__(self, group: str, *, listener: ListenerRunner, sender: MessageSender, offset_store: OffsetStore,
                 message_model: MessageModel, batch_max: int, running: Callable[[], bool]) -> None:
        self.group = group
        self.listener = listener
        self.sender = sender
        self.offset_store = offset_store
        self.message_model = message_model
        self.batch_max = batch_max  # consumeMessageBatchMaxSize: messages a listener call gets
        self.running = running

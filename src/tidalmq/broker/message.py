"""The message the broker stores after its rewrites, and the error a rewrite or check raises.

Shared by the send path and the services that store messages through it (consume-manage send-back,
transactions, schedule hooks), so none of them imports the send processor for its types.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from tidalmq.common.message import (
    decode_properties,
    encode_properties,
    encoded_property,
    has_encoded_property,
)

if TYPE_CHECKING:
    from tidalmq.schedule.timer_service import CancelTarget


class SendError(Exception):
    """Refuses a message: ``code`` and ``remark`` become the response (RocketMQ's ResponseCode)."""

    def __init__(self, code: int, remark: str) -> None:
        super().__init__(remark)
        self.code = code
        self.remark = remark


@dataclass(slots=True)
class InnerMessage:
    """A message after the broker's rewrites (delay, retry ...), ready to encode.

    Properties stay in their wire text unless a rewrite needs them as a dict: most messages
    cross the broker without their properties ever being parsed.
    """

    topic: str
    queue_id: int
    body: bytes | memoryview
    flag: int
    properties_text: str
    sysflag: int
    born_timestamp: int
    born_host: bytes
    born_port: int
    reconsume_times: int = 0
    prepared_transaction_offset: int = 0
    # A TIMER_DEL_UNIQKEY cancel: what the lookup of its target found. The send path looks it up off
    # the event loop before the rewrites run (TimerRewrite.cancel_of), so the rewrite never blocks.
    cancel_target: CancelTarget | None = None
    # Set by TimerRewrite's fast path: (the properties text it wrote, REAL_TOPIC, TIMER_OUT_MS), so the
    # send's response can build the recall handle without searching that text again.
    timer_parked: tuple[str, str, str] | None = None
    _props: dict[str, str] | None = None

    def has_property(self, name: str) -> bool:
        if self._props is not None:
            return name in self._props
        return has_encoded_property(self.properties_text, name)

    @property
    def is_parsed(self) -> bool:
        """True once the properties were parsed (or built) as a dict."""
        return self._props is not None

    def get_property(self, name: str) -> str | None:
        """One property's value, without parsing the others."""
        if self._props is not None:
            return self._props.get(name)
        return encoded_property(self.properties_text, name)

    @property
    def properties(self) -> dict[str, str]:
        """The properties as a dict (parsed on first use; changes to it are what gets stored)."""
        if self._props is None:
            self._props = decode_properties(self.properties_text)
        return self._props

    def encoded_properties(self) -> str:
        return self.properties_text if self._props is None else encode_properties(self._props)

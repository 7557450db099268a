"""The broker's parts a processor is given besides its managers and the store: small Protocols the
BrokerController satisfies, so that each processor names what it uses of the broker and no more."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import asyncio

    from tidalmq.broker.client.consumer_manager import SubscriptionData
    from tidalmq.broker.config import BrokerConfig
    from tidalmq.broker.message import InnerMessage
    from tidalmq.broker.schedule.hooks import TimerRewrite
    from tidalmq.ha.service import HAService
    from tidalmq.remoting.command import RemotingCommand
    from tidalmq.schedule.timer_service import CancelTarget
    from tidalmq.store.config import MessageStoreConfig


class Registration(Protocol):
    """The broker's registration with its NameServers."""

    def register_soon(self) -> None:
        """Register again now (a topic was created or changed)."""

    async def registered(self) -> None:
        """Returns once a registration that began after the call has ended."""


class Filters(Protocol):
    """SQL92 subscriptions (docs/filtering.md)."""

    def check_expression(self, sub: SubscriptionData) -> str | None:
        """Why the subscription's expression cannot be served here, or None."""

    def message_filter(self, sub: SubscriptionData) -> Callable[[int, memoryview], bool] | None:
        """The filter a pull applies to the messages it reads (None for a tag subscription)."""


class InternalSender(Protocol):
    """The send path for messages the broker builds itself (send-back, recall's marker, pop's retry)."""

    def store_internal(self, req: RemotingCommand, msg: InnerMessage) -> asyncio.Future[RemotingCommand]:
        """Stores ``msg`` through the rewrites of a send; the future is the send's answer."""


class SendHost(Protocol):
    """What rewrites a message before it is stored (transactions, delay levels, timers) and the broker's
    place in replication: what the send path asks of the broker."""

    rewrite_hooks: list[Callable[[InnerMessage], None]]
    store_host_bytes: bytes

    @property
    def timer_rewrite(self) -> TimerRewrite:
        """The timer messages' rewrite (a batch's parking)."""

    @property
    def ha_service(self) -> HAService | None:
        """The master's replication service (None on a slave)."""

    def cancel_lookup(self, msg: InnerMessage) -> Awaitable[CancelTarget] | None:
        """A timer cancel's lookup of its target, or None for any other message."""

    def rewrite_before_store(self, msg: InnerMessage) -> None:
        """Runs the rewrite hooks on ``msg``."""


class LiveSettings(Protocol):
    """The configuration an operator reads and changes at run time (UPDATE_BROKER_CONFIG)."""

    config: BrokerConfig
    store_config: MessageStoreConfig
    max_frame: int

    @property
    def config_file(self) -> Path | None:
        """The properties file the broker was started from (-c), where live changes are persisted."""

    def runtime_info(self) -> dict[str, str]:
        """GET_BROKER_RUNTIME_INFO's table."""

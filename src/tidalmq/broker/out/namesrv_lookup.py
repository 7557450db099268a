"""The broker's NameServer list from the address server (``fetchNamesrvAddrByAddressServer``).

RocketMQ's broker asks ``http://{rmqAddressServerDomain}:8080/rocketmq/{rmqAddressServerSubGroup}`` at
start and every two minutes when no namesrvAddr is configured, and registers with the NameServers it
lists (BrokerController's fetchNameServerAddr schedule). A list that changed is registered with at once.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from tidalmq.broker.config import BrokerConfig
from tidalmq.common import top_addressing as ta
from tidalmq.remoting.top_addressing import fetch_namesrv_addrs

log = logging.getLogger(__name__)


def address_server_url(config: BrokerConfig) -> str | None:
    """The URL the broker asks, or None where it does not ask (the key off, or namesrvAddr given)."""
    if not config.fetch_namesrv_addr_by_address_server or config.namesrv_addr:
        return None
    return ta.ws_addr(config.rmq_address_server_domain, config.rmq_address_server_sub_group)


async def fetch_once(config: BrokerConfig, url: str, changed: Callable[[], None]) -> None:
    try:
        addrs = await fetch_namesrv_addrs(url)
    except ta.AddressServerError as e:
        log.warning("NameServer list not fetched: %s", e)
        return
    value = ";".join(addrs)
    if value != config.namesrv_addr:
        log.info("NameServer list from %s: %s (was %s)", url, value, config.namesrv_addr or "none")
        config.namesrv_addr = value
        changed()


async def fetch_loop(config: BrokerConfig, url: str, changed: Callable[[], None],
                     interval: float = ta.FETCH_INTERVAL_S) -> None:
    while True:
        await asyncio.sleep(interval)
        await fetch_once(config, url, changed)

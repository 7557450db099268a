"""Where requests about a queue go: the master of its broker, with one route refresh when unknown."""

from __future__ import annotations

from tidalmq.client.errors import MQClientError
from tidalmq.client.instance import ClientInstance
from tidalmq.client.message import MessageQueue

BROKER_NOT_EXIST = 10003  # MQClientException's code for "The broker[...] not exist"


async def find_master_addr(instance: ClientInstance, mq: MessageQueue) -> str:
    """The master address of ``mq``'s broker; the topic's route is fetched again once when the broker
    is not known yet (a new broker, or a route never fetched). Raises ``MQClientError(10003)``."""
    addr = instance.master_addr(mq.broker_name)
    if addr is None:
        await instance.update_route(mq.topic)
        addr = instance.master_addr(mq.broker_name)
    if addr is None:
        raise MQClientError(BROKER_NOT_EXIST, f"The broker[{mq.broker_name}] not exist")
    return addr

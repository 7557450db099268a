"""Consumer offsets: on the broker for clustering (RemoteBrokerOffsetStore), in a local file for
broadcasting (LocalFileOffsetStore). Offsets are the next queue offset to consume."""

from __future__ import annotations

import json
import logging
import os
import re
from pathlib import Path

from tidalmq.client.errors import MQBrokerError, MQClientError
from tidalmq.client.instance import ClientInstance
from tidalmq.client.message import MessageQueue
from tidalmq.remoting.codes import RequestCode as RC
from tidalmq.remoting.codes import ResponseCode
from tidalmq.remoting.protocol import broker_headers as bh

log = logging.getLogger(__name__)

READ_FAILED = -2  # the broker could not be asked: try again later (RocketMQ returns -2 too)
NOT_FOUND = -1


class OffsetStore:
    """In-memory offsets plus where they are persisted."""

    def __init__(self) -> None:
        self.table: dict[MessageQueue, int] = {}
        self._persisted: dict[MessageQueue, int] = {}

    def update(self, mq: MessageQueue, offset: int, increase_only: bool = False) -> None:
        old = self.table.get(mq)
        if old is None or not increase_only or offset > old:
            self.table[mq] = offset

    def read_memory(self, mq: MessageQueue) -> int:
        return self.table.get(mq, NOT_FOUND)

    async def read(self, mq: MessageQueue, from_store: bool = True) -> int:
        raise NotImplementedError

    async def persist(self, mqs: list[MessageQueue] | None = None) -> None:
        raise NotImplementedError

    def remove(self, mq: MessageQueue) -> None:
        self.table.pop(mq, None)
        self._persisted.pop(mq, None)

    async def load(self) -> None:
        return None


class RemoteBrokerOffsetStore(OffsetStore):
    def __init__(self, instance: ClientInstance, group: str) -> None:
        super().__init__()
        self.instance = instance
        self.group = group

    async def _addr(self, mq: MessageQueue) -> str | None:
        addr = self.instance.master_addr(mq.broker_name)
        if addr is None:
            try:
                await self.instance.update_route(mq.topic)
            except MQClientError:
                return None
            addr = self.instance.master_addr(mq.broker_name)
        return addr

    async def read(self, mq: MessageQueue, from_store: bool = True) -> int:
        """The committed offset: from memory, or the broker (-1 when the group never committed, -2 when
        the broker could not be asked)."""
        if not from_store and mq in self.table:
            return self.table[mq]
        addr = await self._addr(mq)
        if addr is None:
            return READ_FAILED
        ext = bh.QueryConsumerOffsetRequestHeader(consumer_group=self.group, topic=mq.topic, queue_id=mq.queue_id)
        try:
            resp = await self.instance.invoke_ok(addr, RC.QUERY_CONSUMER_OFFSET, ext,
                                                 ok=(ResponseCode.SUCCESS, ResponseCode.QUERY_NOT_FOUND))
        except MQClientError as e:
            log.warning("query offset of %s failed: %s", mq, e)
            return READ_FAILED
        if resp.code == ResponseCode.QUERY_NOT_FOUND:
            return NOT_FOUND
        offset = bh.OffsetResponseHeader.parse(resp.ext_fields).offset
        self.update(mq, offset)
        self._persisted[mq] = offset
        return offset

    async def commit(self, mq: MessageQueue, offset: int) -> None:
        addr = await self._addr(mq)
        if addr is None:
            raise MQClientError(10003, f"The broker[{mq.broker_name}] not exist")
        ext = bh.UpdateConsumerOffsetRequestHeader(consumer_group=self.group, topic=mq.topic, queue_id=mq.queue_id,
                                                   commit_offset=offset)
        await self.instance.invoke_ok(addr, RC.UPDATE_CONSUMER_OFFSET, ext)
        self._persisted[mq] = offset

    async def persist(self, mqs: list[MessageQueue] | None = None) -> None:
        """UPDATE_CONSUMER_OFFSET for each queue whose offset changed since it was last persisted."""
        targets = [mq for mq in (mqs if mqs is not None else list(self.table)) if mq in self.table]
        for mq in targets:
            off = self.table[mq]
            if self._persisted.get(mq) == off:
                continue
            try:
                await self.commit(mq, off)
            except MQBrokerError as e:
                log.warning("persist offset %s of %s failed: %s", off, mq, e)
            except MQClientError as e:
                log.warning("persist offset %s of %s failed: %s", off, mq, e)


_SAFE = re.compile(r"[^A-Za-z0-9_.@#%-]")


class LocalFileOffsetStore(OffsetStore):
    """``<dir>/<clientId>/<group>/offsets.json`` as RocketMQ's LocalFileOffsetStore (its JSON layout
    differs: keys are ``topic@broker@queueId``). Set ``instance_name`` to keep offsets across restarts."""

    def __init__(self, base_dir: str | os.PathLike[str] | None, client_id: str, group: str) -> None:
        super().__init__()
        base = Path(base_dir or os.environ.get("TIDALMQ_OFFSET_STORE_DIR")
                    or Path.home() / ".tidalmq_offsets")
        self.path = base / _SAFE.sub("_", client_id) / _SAFE.sub("_", group) / "offsets.json"

    async def load(self) -> None:
        try:
            data = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return
        for key, off in (data.get("offsetTable") or {}).items():
            topic, broker, qid = key.rsplit("@", 2)
            mq = MessageQueue(topic, broker, int(qid))
            self.table[mq] = int(off)
            self._persisted[mq] = int(off)

    async def read(self, mq: MessageQueue, from_store: bool = True) -> int:
        return self.table.get(mq, NOT_FOUND)

    async def persist(self, mqs: list[MessageQueue] | None = None) -> None:
        if self.table == self._persisted:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        body = {"offsetTable": {f"{mq.topic}@{mq.broker_name}@{mq.queue_id}": off for mq, off in self.table.items()}}
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(body, indent=1, sort_keys=True))
        os.replace(tmp, self.path)
        self._persisted = dict(self.table)

    async def commit(self, mq: MessageQueue, offset: int) -> None:
        self.update(mq, offset)
        await self.persist()

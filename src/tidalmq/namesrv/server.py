"""NameServer request processors (DefaultRequestProcessor) over the remoting transport."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import TYPE_CHECKING

from tidalmq.common import fastjson
from tidalmq.common import naming as nm
from tidalmq.common.fileutil import atomic_write, read_with_backup
from tidalmq.namesrv.processor import DefaultRequestProcessor
from tidalmq.namesrv.routeinfo import (
    RouteInfoManager,
)
from tidalmq.remoting.config import RemotingServerConfig
from tidalmq.remoting.protocol import requests as rq
from tidalmq.remoting.request_check import serve
from tidalmq.remoting.tls import TlsConfig, server_context
from tidalmq.remoting.transport import Connection, RemotingServer

if TYPE_CHECKING:
    from tidalmq.acl.validator import PlainAccessValidator

log = logging.getLogger(__name__)

SCAN_INTERVAL_S = 5.0


class NameServer:
    def __init__(self, host: str = "0.0.0.0", port: int = 9876, kv_config_path: str | Path | None = None,
                 acl: PlainAccessValidator | None = None, *,
                 remoting_config: RemotingServerConfig | None = None, tls: TlsConfig | None = None) -> None:
        self.routes = RouteInfoManager()
        tls = tls or TlsConfig()
        self.server = RemotingServer(host, port, config=remoting_config, ssl_context=server_context(tls),
                                     tls_mode=tls.server_mode)
        self.kv_config_path = Path(kv_config_path) if kv_config_path else None
        self._scan_task: asyncio.Task[None] | None = None
        # ACL (docs/acl.md): broker registration and route/KV writes need an admin account; reads stay open.
        self.acl = acl
        self.server.access_validator = acl
        self._acl_task: asyncio.Task[None] | None = None
        s, p = self.server, DefaultRequestProcessor(self.routes, self._persist_kv)
        serve(s, rq.REGISTER_BROKER, p.register_broker)
        serve(s, rq.UNREGISTER_BROKER, p.unregister_broker)
        serve(s, rq.GET_ROUTEINFO_BY_TOPIC, p.get_route)
        serve(s, rq.GET_BROKER_CLUSTER_INFO, p.get_cluster_info)
        serve(s, rq.GET_ALL_TOPIC_LIST_FROM_NAMESERVER, p.get_all_topics)
        serve(s, rq.GET_TOPICS_BY_CLUSTER, p.get_topics_by_cluster)
        serve(s, rq.DELETE_TOPIC_IN_NAMESRV, p.delete_topic)
        serve(s, rq.PUT_KV_CONFIG, p.put_kv)
        serve(s, rq.GET_KV_CONFIG, p.get_kv)
        serve(s, rq.DELETE_KV_CONFIG, p.delete_kv)
        serve(s, rq.GET_KVLIST_BY_NAMESPACE, p.get_kv_list)
        serve(s, rq.QUERY_DATA_VERSION, p.query_data_version)
        s.close_listeners.append(self._on_close)

    @property
    def port(self) -> int:
        return self.server.port

    async def start(self) -> None:
        self._load_kv()
        await self.server.start()
        self._scan_task = asyncio.get_running_loop().create_task(self._scan_loop())
        if self.acl is not None:
            self._acl_task = asyncio.get_running_loop().create_task(self.acl.watch())
        log.info("NameServer listening on %s:%s", self.server.host, self.server.port)

    async def stop(self) -> None:
        for task in (self._scan_task, self._acl_task):
            if task is not None:
                task.cancel()
        await self.server.stop()

    async def _scan_loop(self) -> None:
        while True:
            await asyncio.sleep(SCAN_INTERVAL_S)
            for addr in self.routes.scan_not_active_brokers():
                log.warning("broker %s expired: no heartbeat within its timeout", addr)

    def _on_close(self, conn: Connection) -> None:
        addr = self.routes.broker_addr_of_conn(conn)
        if addr is not None:
            log.info("broker connection %s closed, removing %s", conn.addr, addr)
            self.routes.on_broker_gone(addr)

    # KV persistence ---------------------------------------------------------------------------
    def _load_kv(self) -> None:
        if self.kv_config_path is None:
            return
        raw = read_with_backup(self.kv_config_path)
        if raw:
            table = fastjson.loads(raw).get("configTable", {})
            for ns, kvs in table.items():
                for k, v in (kvs.items() if isinstance(kvs, dict) else ()):
                    if not (nm.is_legal(nm.check_config_key, ns) and nm.is_legal(nm.check_config_key, k)
                            and isinstance(v, str)):
                        log.warning("%s: ignoring config %r / %r: not a legal namespace and key", self.kv_config_path, ns, k)
                        continue
                    self.routes.put_kv(ns, k, v)

    def _persist_kv(self) -> None:
        if self.kv_config_path is not None:
            atomic_write(self.kv_config_path, fastjson.dumpb({"configTable": self.routes.kv}))

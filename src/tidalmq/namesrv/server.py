"""NameServer request processors (DefaultRequestProcessor) over the remoting transport."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tidalmq.common import fastjson
from tidalmq.common import naming as nm
from tidalmq.common.fileutil import atomic_write, read_with_backup
from tidalmq.common.record import body_crc
from tidalmq.namesrv.routeinfo import (
    BROKER_CHANNEL_EXPIRED_MS,
    ORDER_TOPIC_CONFIG_NAMESPACE,
    RouteInfoManager,
)
from tidalmq.remoting.codes import ResponseCode
from tidalmq.remoting.command import RemotingCommand
from tidalmq.remoting.config import RemotingServerConfig
from tidalmq.remoting.protocol import namesrv_headers as nh
from tidalmq.remoting.protocol import requests as rq
from tidalmq.remoting.protocol.header import NoHeader
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
        s = self.server
        serve(s, rq.REGISTER_BROKER, self.register_broker)
        serve(s, rq.UNREGISTER_BROKER, self.unregister_broker)
        serve(s, rq.GET_ROUTEINFO_BY_TOPIC, self.get_route)
        serve(s, rq.GET_BROKER_CLUSTER_INFO, self.get_cluster_info)
        serve(s, rq.GET_ALL_TOPIC_LIST_FROM_NAMESERVER, self.get_all_topics)
        serve(s, rq.GET_TOPICS_BY_CLUSTER, self.get_topics_by_cluster)
        serve(s, rq.DELETE_TOPIC_IN_NAMESRV, self.delete_topic)
        serve(s, rq.PUT_KV_CONFIG, self.put_kv)
        serve(s, rq.GET_KV_CONFIG, self.get_kv)
        serve(s, rq.DELETE_KV_CONFIG, self.delete_kv)
        serve(s, rq.GET_KVLIST_BY_NAMESPACE, self.get_kv_list)
        serve(s, rq.QUERY_DATA_VERSION, self.query_data_version)
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

    # processors -------------------------------------------------------------------------------
    def register_broker(self, conn: Connection, req: RemotingCommand, h: nh.RegisterBrokerRequestHeader) -> RemotingCommand:
        body = req.body_bytes()
        if h.body_crc32:
            if body_crc(body) != h.body_crc32:
                return req.make_response(ResponseCode.SYSTEM_ERROR, "receive registerBroker request,crc32 not match")
        topics: dict[str, dict[str, Any]] = {}
        data_version: dict[str, Any] = {}
        if body:
            if h.compressed:
                return req.make_response(ResponseCode.SYSTEM_ERROR, "compressed registration bodies are not supported")
            obj = fastjson.loads(body)
            wrapper = obj.get("topicConfigSerializeWrapper", obj)
            topics = wrapper.get("topicConfigTable", {}) or {}
            data_version = wrapper.get("dataVersion", {}) or {}
        timeout = h.heartbeat_timeout_millis or BROKER_CHANNEL_EXPIRED_MS
        ha, master = self.routes.register_broker(
            h.cluster_name, h.broker_addr, h.broker_name, h.broker_id, h.ha_server_addr, topics, data_version, conn,
            timeout,
        )
        kv_body = fastjson.dumpb({"table": self.routes.kv_list(ORDER_TOPIC_CONFIG_NAMESPACE)})
        answer = nh.RegisterBrokerResponseHeader(ha_server_addr=ha, master_addr=master).to_ext()
        return req.make_response(ResponseCode.SUCCESS, None, answer, kv_body)

    def unregister_broker(self, conn: Connection, req: RemotingCommand,
                          h: nh.BrokerIdentityRequestHeader) -> RemotingCommand:
        self.routes.unregister_broker(h.cluster_name, h.broker_addr, h.broker_name, h.broker_id)
        return req.make_response(ResponseCode.SUCCESS)

    def get_route(self, conn: Connection, req: RemotingCommand, h: nh.GetRouteInfoRequestHeader) -> RemotingCommand:
        topic = h.topic
        route = self.routes.pickup_topic_route(topic)
        if route is None:
            return req.make_response(ResponseCode.TOPIC_NOT_EXIST, f"No topic route info in name server for the topic: {topic}")
        return req.make_response(ResponseCode.SUCCESS, None, body=fastjson.dumpb(route))

    def get_cluster_info(self, conn: Connection, req: RemotingCommand, _: NoHeader) -> RemotingCommand:
        return req.make_response(ResponseCode.SUCCESS, body=fastjson.dumpb(self.routes.cluster_info()))

    def get_all_topics(self, conn: Connection, req: RemotingCommand, _: NoHeader) -> RemotingCommand:
        return req.make_response(ResponseCode.SUCCESS, body=fastjson.dumpb({"topicList": self.routes.all_topics()}))

    def get_topics_by_cluster(self, conn: Connection, req: RemotingCommand,
                              h: nh.GetTopicsByClusterRequestHeader) -> RemotingCommand:
        cluster = h.cluster
        return req.make_response(ResponseCode.SUCCESS, body=fastjson.dumpb({"topicList": self.routes.topics_by_cluster(cluster)}))

    def delete_topic(self, conn: Connection, req: RemotingCommand,
                     h: nh.DeleteTopicFromNamesrvRequestHeader) -> RemotingCommand:
        self.routes.delete_topic(h.topic, h.cluster_name or None)
        return req.make_response(ResponseCode.SUCCESS)

    def put_kv(self, conn: Connection, req: RemotingCommand, h: nh.PutKVConfigRequestHeader) -> RemotingCommand:
        if not h.namespace or not h.key:
            return req.make_response(ResponseCode.SYSTEM_ERROR, "namespace or key empty")
        self.routes.put_kv(h.namespace, h.key, h.value)
        self._persist_kv()
        return req.make_response(ResponseCode.SUCCESS)

    def get_kv(self, conn: Connection, req: RemotingCommand, h: nh.KVConfigRequestHeader) -> RemotingCommand:
        v = self.routes.get_kv(h.namespace, h.key)
        if v is None:
            return req.make_response(ResponseCode.QUERY_NOT_FOUND, f"No config item, Namespace: {h.namespace} Key: {h.key}")
        return req.make_response(ResponseCode.SUCCESS, None, nh.GetKVConfigResponseHeader(value=v).to_ext())

    def delete_kv(self, conn: Connection, req: RemotingCommand, h: nh.KVConfigRequestHeader) -> RemotingCommand:
        self.routes.delete_kv(h.namespace, h.key)
        self._persist_kv()
        return req.make_response(ResponseCode.SUCCESS)

    def get_kv_list(self, conn: Connection, req: RemotingCommand,
                    h: nh.GetKVListByNamespaceRequestHeader) -> RemotingCommand:
        ns = h.namespace
        table = self.routes.kv_list(ns)
        if not table:
            return req.make_response(ResponseCode.QUERY_NOT_FOUND, f"No config item, Namespace: {ns}")
        return req.make_response(ResponseCode.SUCCESS, body=fastjson.dumpb({"table": table}))

    def query_data_version(self, conn: Connection, req: RemotingCommand,
                           h: nh.BrokerIdentityRequestHeader) -> RemotingCommand:
        addr = h.broker_addr
        live = self.routes.broker_live_table.get(addr)
        if live is not None:
            live.last_update_ms = self.routes._clock()
        changed = live is None or live.data_version != fastjson.loads(req.body_bytes() or b"{}")
        return req.make_response(ResponseCode.SUCCESS, None, nh.QueryDataVersionResponseHeader(changed=changed).to_ext(),
                                 fastjson.dumpb(live.data_version if live else {}))

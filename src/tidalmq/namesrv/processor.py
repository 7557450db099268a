"""The NameServer's request processors (DefaultRequestProcessor): routes, cluster info, topic lists and the
KV config, each reading its declared header (remoting/protocol/namesrv_headers.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tidalmq.common import fastjson
from tidalmq.common.record import body_crc
from tidalmq.namesrv.routeinfo import (
    BROKER_CHANNEL_EXPIRED_MS,
    ORDER_TOPIC_CONFIG_NAMESPACE,
    RouteInfoManager,
)
from tidalmq.remoting.codes import ResponseCode
from tidalmq.remoting.command import RemotingCommand
from tidalmq.remoting.protocol import namesrv_headers as nh
from tidalmq.remoting.protocol.header import NoHeader
from tidalmq.remoting.transport import Connection


class DefaultRequestProcessor:
    def __init__(self, routes: RouteInfoManager, persist_kv: Callable[[], None]) -> None:
        """``persist_kv`` writes the KV config where the NameServer keeps it (after a put or a delete)."""
        self.routes = routes
        self._persist_kv = persist_kv

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

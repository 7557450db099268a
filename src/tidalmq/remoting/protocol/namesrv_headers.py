"""The NameServer's request and response headers (RocketMQ's ``header.namesrv`` classes)."""

from __future__ import annotations

from tidalmq.remoting.protocol.header import Header, Kind, header, spec

_X, _L = Kind.TEXT, Kind.INT64


@header
class RegisterBrokerRequestHeader(Header):
    broker_name: str = spec("brokerName", Kind.BROKER)
    broker_addr: str = spec("brokerAddr", Kind.ADDR)
    cluster_name: str = spec("clusterName", Kind.CLUSTER)
    ha_server_addr: str = spec("haServerAddr", Kind.ADDR, default="")
    # A registration without one registers brokerId 0, as before.
    broker_id: int = spec("brokerId", _L, default=0)
    heartbeat_timeout_millis: int | None = spec("heartbeatTimeoutMillis", _L, default=None)
    compressed: bool = spec("compressed", Kind.BOOL, default=False)
    body_crc32: int = spec("bodyCrc32", Kind.INT32, default=0)


@header
class RegisterBrokerResponseHeader(Header):
    ha_server_addr: str = spec("haServerAddr", _X, default="")
    master_addr: str = spec("masterAddr", _X, default="")


@header
class BrokerIdentityRequestHeader(Header):
    """UnRegisterBrokerRequestHeader, QueryDataVersionRequestHeader: brokerId @CFNotNull, as RocketMQ."""

    broker_name: str = spec("brokerName", Kind.BROKER)
    broker_addr: str = spec("brokerAddr", Kind.ADDR)
    cluster_name: str = spec("clusterName", Kind.CLUSTER)
    broker_id: int = spec("brokerId", _L)


@header
class QueryDataVersionResponseHeader(Header):
    changed: bool = spec("changed", Kind.BOOL, default=False)


@header
class GetRouteInfoRequestHeader(Header):
    topic: str = spec("topic", Kind.TOPIC)


@header
class GetTopicsByClusterRequestHeader(Header):
    cluster: str = spec("cluster", Kind.CLUSTER)


@header
class DeleteTopicFromNamesrvRequestHeader(Header):
    topic: str = spec("topic", Kind.TOPIC)
    cluster_name: str | None = spec("clusterName", Kind.CLUSTER, default=None)


@header
class PutKVConfigRequestHeader(Header):
    namespace: str = spec("namespace", Kind.CONFIG_KEY)
    key: str = spec("key", Kind.CONFIG_KEY)
    value: str = spec("value", _X, default="")


@header
class KVConfigRequestHeader(Header):
    """GetKVConfigRequestHeader, DeleteKVConfigRequestHeader."""

    namespace: str = spec("namespace", Kind.CONFIG_KEY)
    key: str = spec("key", Kind.CONFIG_KEY)


@header
class GetKVConfigResponseHeader(Header):
    value: str | None = spec("value", _X, default=None)


@header
class GetKVListByNamespaceRequestHeader(Header):
    namespace: str = spec("namespace", Kind.CONFIG_KEY)


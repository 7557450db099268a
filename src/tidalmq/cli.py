"""The ``tidalmq`` command: standalone, namesrv, broker, proxy, console and admin."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import logging
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from tidalmq import __version__
from tidalmq.acl.config import Account, AclConfigError
from tidalmq.broker.config import BrokerConfig, default_data_dir
from tidalmq.broker.schedule.child import start_early
from tidalmq.common.collector import settle_after_start
from tidalmq.common.config import ConfigError, apply_properties, load_properties_file
from tidalmq.common.top_addressing import configured_addr
from tidalmq.console.config import DEFAULT_CONSOLE_PORT, ConsoleConfig
from tidalmq.namesrv.address_server import AddressServer, AddressServerConfig, NamesrvAddressList
from tidalmq.proxy.config import ProxyConfig
from tidalmq.remoting.config import RemotingServerConfig
from tidalmq.remoting.tls import TlsConfig, client_context_from, is_tls_key, tls_config
from tidalmq.store.config import MessageStoreConfig

if TYPE_CHECKING:
    from tidalmq.console.server import ConsoleServer

log = logging.getLogger("tidalmq")

ACL_FILE_KEY = "rocketmq.acl.plain.file"


def _install_uvloop() -> None:
    try:
        import uvloop

        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    except ImportError:  # uvloop is optional on platforms that lack it
        pass


def _port(lo: int) -> Callable[[str], int]:
    """An argparse type: a TCP port from ``lo`` (-1 where the flag can turn a server off) to 65535."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a port: {text!r}") from None
        if not lo <= value <= 65535:
            raise argparse.ArgumentTypeError(f"port {value} is not between {lo} and 65535")
        return value
    return parse


def _parse_overrides(items: list[str] | None) -> dict[str, str]:
    out = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep:
            raise ConfigError(f"--set expects key=value, got {item!r}")
        out[key.strip()] = value.strip()
    return out


def _load_props(args: argparse.Namespace) -> dict[str, str]:
    """-c FILE, then each --set KEY=VALUE over it."""
    props: dict[str, str] = {}
    if getattr(args, "config", None):
        props.update(load_properties_file(args.config))
    props.update(_parse_overrides(getattr(args, "set", None)))
    # RocketMQ's name for the ACL file (a JVM property there) has dots, which no field name can.
    if ACL_FILE_KEY in props:
        props["aclPlainFile"] = props.pop(ACL_FILE_KEY)
    return props


def server_settings(props: dict[str, str]) -> tuple[RemotingServerConfig, TlsConfig, dict[str, str]]:
    """The remoting limits and the ``tls.*`` keys of ``props``, and the keys neither knows."""
    tls = tls_config(props)
    rest = {k: v for k, v in props.items() if not is_tls_key(k)}
    rc = RemotingServerConfig()
    unknown = apply_properties(rc, rest)
    rc.validate()
    return rc, tls, {k: rest[k] for k in unknown}


def build_broker_configs(args: argparse.Namespace, data_dir: str, proxy: ProxyConfig | None = None,
                         console: ConsoleConfig | None = None, address_server: AddressServerConfig | None = None
                         ) -> tuple[BrokerConfig, MessageStoreConfig, RemotingServerConfig, TlsConfig]:
    """The broker's, the store's and the remoting server's configuration from ``-c`` and ``--set``
    (and the gRPC endpoint's into ``proxy`` and the web console's into ``console``, for the standalone),
    validated (a ``ConfigError`` names the key): callers build it before they bind any port."""
    props = _load_props(args)
    rc, tls, props = server_settings(props)
    bc = BrokerConfig()
    if proxy is not None:  # the standalone: its metrics endpoints on unless metricsExporterType=DISABLE
        bc.metrics_exporter_type = "PROM"
    sc = MessageStoreConfig()
    sc.store_path_root_dir = os.path.join(data_dir, "store")
    unknown = apply_properties(sc, props)
    unknown = apply_properties(bc, {k: props[k] for k in unknown})
    if proxy is not None:
        unknown = apply_properties(proxy, {k: props[k] for k in unknown})
        proxy.max_message_size = sc.max_message_size
        if "enableTopicMessageTypeCheck" in props:  # else each keeps its own default (RocketMQ's: proxy on)
            proxy.enable_topic_message_type_check = bc.enable_topic_message_type_check
    if console is not None:
        unknown = apply_properties(console, {k: props[k] for k in unknown})
    if address_server is not None:
        unknown = apply_properties(address_server, {k: props[k] for k in unknown})
        address_server.validate()
    for key in unknown:
        log.warning("unknown configuration key %s ignored (not a key TidalMQ uses)", key)
    if getattr(args, "broker_port", None) is not None:
        bc.listen_port = args.broker_port
    if not props.get("storePathCommitLog"):
        sc.store_path_commit_log = ""
    if not bc.is_slave and not bc.enable_controller_mode:
        bc.broker_id = 0  # a master's id, whatever the file says (RocketMQ's BrokerStartup does the same)
    bc.validate()
    sc.validate()
    if proxy is not None:
        proxy.validate()
    return bc, sc, rc, tls


def _stop_on_signal() -> asyncio.Event:
    """An event SIGTERM and SIGINT set from now on. Installed before a server says it is ready: whoever
    stops it right after gets the clean shutdown, not the default action's unclean exit."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    return stop


def _advertised(host: str, port: int) -> str:
    """This NameServer's address as the address server hands it out (a wildcard bind as loopback)."""
    return f"{'127.0.0.1' if host in ('0.0.0.0', '::', '') else host}:{port}"


def _address_text(host: str, server: AddressServer | None) -> str:
    if server is None:
        return ""
    return f" address-server http://{host}:{server.port}/rocketmq/{server.config.address_server_sub_group}"


async def _start_address_server(host: str, config: AddressServerConfig, own: list[str]) -> AddressServer | None:
    if config.address_server_port < 0:
        return None
    server = AddressServer(host, config, NamesrvAddressList(config, own))
    await server.start()
    return server


async def _standalone(args: argparse.Namespace) -> int:
    data_dir = args.data_dir or default_data_dir()
    pc = ProxyConfig()
    cc = ConsoleConfig()
    asc = AddressServerConfig()
    bc, sc, rc, tls = build_broker_configs(args, data_dir, pc, cc, asc)  # refused before any port is bound
    schedule_child = start_early(bc, sc)  # its start-up runs beside the imports that follow
    from tidalmq.broker.broker_controller import BrokerController
    from tidalmq.namesrv.server import NameServer

    if args.grpc_port is not None:
        pc.grpc_server_port = args.grpc_port
    if args.console_port is not None:
        cc.console_port = args.console_port
        if args.console_port < 0:
            cc.console_enable = False
    if bc.ha_listen_port < 0:
        # Not listenPort + 1 here: a standalone is most often alone, and its own NameServer tells any
        # slave the HA port it took (docs/replication.md).
        # (Controller mode keeps listenPort + 1: etcd's record names the port before it is bound.)
        bc.ha_listen_port = -1 if bc.enable_controller_mode else 0
    Path(data_dir).mkdir(parents=True, exist_ok=True)
    ns_acl = None
    internal = None
    if bc.acl_enable:
        from tidalmq.acl import acl_home, internal_account, namesrv_validator

        # The NameServer reads the same files; the broker beside it signs with its own accessKey, or
        # else with an admin account that exists only in this process.
        extra: tuple[Account, ...] = ()
        if not (bc.access_key and bc.secret_key):
            account, internal = internal_account()
            extra = (account,)
        ns_acl = namesrv_validator(acl_home(data_dir), bc.acl_plain_file or None, extra)
    ns = NameServer(args.host, args.namesrv_port, kv_config_path=os.path.join(data_dir, "namesrv", "kvConfig.json"),
                    acl=ns_acl, remoting_config=rc, tls=tls)
    await ns.start()
    bc.namesrv_addr = f"127.0.0.1:{ns.port}"
    address_server = await _start_address_server(args.host, asc, [_advertised(args.host, ns.port)])
    if args.host not in ("0.0.0.0", "::", ""):
        bc.broker_ip1 = args.host
    if tls.server_mode == "enforcing":  # the broker registers with its own NameServer, which takes TLS only
        tls = dataclasses.replace(tls, enable=True)
    broker = BrokerController(bc, sc, host=args.host, home=data_dir, remoting_config=rc, tls=tls,
                              schedule_child=schedule_child)
    if getattr(args, "config", None):
        broker.config_file = Path(args.config)
    endpoint_creds = None
    if internal is not None:
        from tidalmq.acl import RequestSigner

        broker.outer_api.signer = RequestSigner(internal)
        if broker.acl is not None:  # the gRPC endpoint reaches the broker as this identity too
            broker.acl.add_accounts((account,))
        endpoint_creds = internal
    elif bc.acl_enable:
        from tidalmq.acl import SessionCredentials

        endpoint_creds = SessionCredentials(bc.access_key, bc.secret_key)
    await broker.start()
    await broker.outer_api.register_all()
    from tidalmq.namesrv.metrics import start_namesrv_exporter

    exporters = [e for e in (
        broker.start_metrics_exporter(),
        start_namesrv_exporter(ns, bc.metrics_exporter_type, bc.metrics_prom_exporter_host,
                               bc.namesrv_metrics_prom_exporter_port, "namesrvMetricsPromExporterPort"),
    ) if e is not None]
    grpc_server = None
    grpc_text = ""
    if pc.grpc_server_port >= 0:
        from tidalmq.proxy.server import GrpcServer

        # One ACL for both doors: the broker's validator (and its file watch) checks gRPC calls too.
        grpc_server = GrpcServer(args.host, bc.namesrv_addr, pc, tls, acl=broker.acl, credentials=endpoint_creds)
        await grpc_server.start()
        grpc_text = f" grpc {args.host}:{grpc_server.port}"
    console = None
    console_text = ""
    if cc.console_enable:
        console = await _start_standalone_console(args.host, cc, bc, tls)
        console_text = f" console http://{args.host}:{console.port}/" if console is not None else ""
    settle_after_start()
    stop = _stop_on_signal()
    print(f"TidalMQ {__version__} standalone ready: namesrv {args.host}:{ns.port} broker {bc.broker_addr}"
          f"{grpc_text}{console_text}{_address_text(args.host, address_server)} data {data_dir}", flush=True)
    await stop.wait()
    log.info("shutting down")
    if console is not None:
        await console.stop()
    if address_server is not None:
        await address_server.stop()
    for exporter in exporters:
        exporter.stop()
    if grpc_server is not None:
        await grpc_server.stop()
    await broker.stop()
    await ns.stop()
    print("TidalMQ stopped", flush=True)
    return 0


async def _start_standalone_console(host: str, cc: ConsoleConfig, bc: BrokerConfig, tls: TlsConfig
                                   ) -> ConsoleServer | None:
    """The web console beside the standalone's broker. With ACL it signs with the broker's accessKey and
    secretKey and asks for them as its login; with ACL but no such keys it is not served (an open console
    would administer an ACL-protected broker for anyone who reaches it)."""
    from tidalmq.acl.signature import SessionCredentials
    from tidalmq.console.server import ConsoleServer

    credentials = None
    if bc.acl_enable:
        if not (bc.access_key and bc.secret_key):
            log.warning("aclEnable without accessKey/secretKey: the web console is not served (docs/console.md)")
            return None
        credentials = SessionCredentials(bc.access_key, bc.secret_key)
    console = ConsoleServer(host, cc.console_port, bc.namesrv_addr, credentials, tls=client_context_from(tls),
                            allowed_hosts=cc.allowed_hosts())
    await console.start()
    return console


async def _console(args: argparse.Namespace) -> int:
    """The web console alone, in front of a NameServer and its brokers (``tidalmq console -n ADDR``)."""
    from tidalmq.admin_cli import admin_credentials, admin_tls
    from tidalmq.console.server import ConsoleServer

    try:
        credentials = admin_credentials(args)
    except ValueError as e:
        print(f"tidalmq console: {e}", file=sys.stderr)
        return 2
    console = ConsoleServer(args.host, args.port, args.namesrv or "", credentials, tls=admin_tls(args),
                            allowed_hosts=tuple(args.allowed_host), namesrv_domain=args.namesrv_domain,
                            namesrv_domain_subgroup=args.namesrv_domain_subgroup)
    await console.start()
    login = " (login: the accessKey and secretKey)" if credentials is not None else ""
    stop = _stop_on_signal()
    where = ";".join(console.admin.namesrv_addrs) or f"from {console.admin.ws_addr}"
    print(f"TidalMQ {__version__} console ready: http://{args.host}:{console.port}/ namesrv {where}{login}",
          flush=True)
    await stop.wait()
    await console.stop()
    return 0


async def _namesrv(args: argparse.Namespace) -> int:
    from tidalmq.namesrv.server import NameServer

    data_dir = args.data_dir or default_data_dir()
    from tidalmq.namesrv.metrics import NamesrvMetricsConfig, start_namesrv_exporter

    rc, tls, rest = server_settings(_load_props(args))
    mc = NamesrvMetricsConfig()
    asc = AddressServerConfig()
    for key in apply_properties(asc, {k: rest[k] for k in apply_properties(mc, rest)}):
        log.warning("unknown configuration key %s ignored", key)
    mc.validate()
    asc.validate()
    acl = None
    if args.acl_enable:
        from tidalmq.acl import acl_home, namesrv_validator

        acl = namesrv_validator(acl_home(data_dir), args.acl_file)
    ns = NameServer(args.host, args.port, kv_config_path=os.path.join(data_dir, "namesrv", "kvConfig.json"), acl=acl,
                    remoting_config=rc, tls=tls)
    await ns.start()
    exporter = start_namesrv_exporter(ns, mc.metrics_exporter_type, mc.metrics_prom_exporter_host,
                                      mc.metrics_prom_exporter_port)
    address_server = await _start_address_server(args.host, asc, [_advertised(args.host, ns.port)])
    stop = _stop_on_signal()
    print(f"TidalMQ {__version__} namesrv ready on {args.host}:{ns.port}{_address_text(args.host, address_server)}",
          flush=True)
    await stop.wait()
    if address_server is not None:
        await address_server.stop()
    if exporter is not None:
        exporter.stop()
    await ns.stop()
    return 0


async def _broker(args: argparse.Namespace) -> int:
    data_dir = args.data_dir or default_data_dir()
    bc, sc, rc, tls = build_broker_configs(args, data_dir)
    schedule_child = start_early(bc, sc)  # its start-up runs beside the imports that follow
    from tidalmq.broker.broker_controller import BrokerController

    if args.namesrv:
        bc.namesrv_addr = args.namesrv
    elif not bc.namesrv_addr:
        bc.namesrv_addr = configured_addr() or ("" if bc.fetch_namesrv_addr_by_address_server else "127.0.0.1:9876")
    broker = BrokerController(bc, sc, host=args.host, home=data_dir, remoting_config=rc, tls=tls,
                              schedule_child=schedule_child)
    if getattr(args, "config", None):
        broker.config_file = Path(args.config)
    await broker.start()
    exporter = broker.start_metrics_exporter()
    settle_after_start()
    stop = _stop_on_signal()
    print(f"TidalMQ {__version__} broker {bc.broker_name} ready on {bc.broker_addr}", flush=True)
    await stop.wait()
    if exporter is not None:
        exporter.stop()
    await broker.stop()
    return 0


async def _proxy(args: argparse.Namespace) -> int:
    """RocketMQ's proxy in cluster mode: the gRPC endpoint in front of a NameServer and its brokers."""
    from tidalmq.proxy.server import GrpcServer

    props = _load_props(args)
    _rc, tls, rest = server_settings(props)
    pc = ProxyConfig()
    namesrv = args.namesrv or rest.pop("namesrvAddr", None) or os.environ.get("NAMESRV_ADDR", "127.0.0.1:9876")
    for key in apply_properties(pc, rest):
        log.warning("unknown configuration key %s ignored", key)
    if args.grpc_port is not None:
        pc.grpc_server_port = args.grpc_port
    pc.validate()
    acl = creds = None
    if pc.acl_enable:
        from tidalmq.acl import AclConfigError, acl_home, broker_validator, tools_credentials

        home = acl_home(default_data_dir())  # $ROCKETMQ_HOME, as RocketMQ's proxy looks
        try:
            acl = broker_validator(home, pc.acl_plain_file or None)
        except AclConfigError as e:
            print(f"tidalmq proxy: {e}", file=sys.stderr)
            return 2
        creds = tools_credentials(home)  # RocketMQ's proxy: the inner identity of conf/tools.yml
        if creds is None:
            log.warning("aclEnable without %s/conf/tools.yml: the endpoint's own requests go unsigned", home)
    server = GrpcServer(args.host, namesrv, pc, tls, acl=acl, credentials=creds, watch_acl=acl is not None)
    await server.start()
    stop = _stop_on_signal()
    print(f"TidalMQ {__version__} proxy ready: grpc {args.host}:{server.port} namesrv {namesrv}", flush=True)
    await stop.wait()
    await server.stop()
    return 0


async def _cluster(args: argparse.Namespace) -> int:
    """Start the trial cluster's processes, print where they listen, stop them all on SIGTERM/Ctrl-C."""
    import shutil

    from tidalmq.cluster import Supervisor, default_cluster_dir, plan_cluster

    etcd = ""
    if args.controller and not args.etcd_endpoints:
        etcd = shutil.which("etcd") or ""
        if not etcd:
            raise ConfigError("--controller needs etcd (apt-get install etcd-server) or --etcd-endpoints")
    try:
        plan = plan_cluster(groups=args.groups, replicas=args.replicas,
                            data_dir=Path(args.data_dir or default_cluster_dir()).resolve(),
                            base_port=args.base_port, host=args.host, controller=args.controller,
                            etcd_endpoints=args.etcd_endpoints or "", master_role=args.master_role or "",
                            extra=_parse_overrides(args.set), etcd_binary=etcd)
    except ValueError as e:
        raise ConfigError(str(e)) from e
    sup = Supervisor(plan)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    starting = asyncio.ensure_future(sup.start())
    stopped = asyncio.ensure_future(stop.wait())
    await asyncio.wait([starting, stopped], return_when=asyncio.FIRST_COMPLETED)
    code = 0
    if starting.done() and starting.exception() is None:
        print(sup.describe(), flush=True)
        print(f"TidalMQ {__version__} cluster ready: {args.groups} groups x {args.replicas} replicas, "
              f"namesrvAddr={plan.namesrv_addr}", flush=True)
        reporter = asyncio.ensure_future(sup.report_exits(stop))
        await stopped
        reporter.cancel()
    elif starting.done():
        print(f"tidalmq cluster: {starting.exception()}", file=sys.stderr, flush=True)
        code = 1
    else:
        starting.cancel()
    await sup.stop()
    print("TidalMQ cluster stopped", flush=True)
    return code


def _add_broker_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("-c", "--config", help="broker.conf (RocketMQ key names)")
    p.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a config key (repeatable)")
    p.add_argument("--data-dir", help=f"data directory (default {default_data_dir()})")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tidalmq", description="TidalMQ: a RocketMQ-compatible broker")
    parser.add_argument("--version", action="version", version=f"tidalmq {__version__}")
    parser.add_argument("--log-level", default=os.environ.get("TIDALMQ_LOG_LEVEL", "INFO"))
    sub = parser.add_subparsers(dest="cmd", required=True)

    p = sub.add_parser("standalone", help="NameServer and Broker in one process",
                       epilog="ports it listens on: the NameServer (--namesrv-port, 9876), the broker (--broker-port, "
                       "10911), the gRPC endpoint (--grpc-port, 8081), the web console (--console-port, 8082) and "
                       "the metrics endpoints of the broker and the NameServer (--set metricsPromExporterPort=5557, "
                       "--set namesrvMetricsPromExporterPort=5558; 0 any free port, or --set "
                       "metricsExporterType=DISABLE for none)")
    _add_broker_options(p)
    p.add_argument("--namesrv-port", type=_port(0), default=9876)
    p.add_argument("--broker-port", type=_port(0), default=None, help="the broker's listenPort (default 10911)")
    p.add_argument("--grpc-port", type=_port(-1), default=None,
                   help="the gRPC endpoint's port, grpcServerPort (default 8081; 0 any free port, -1 none)")
    p.add_argument("--console-port", type=_port(-1), default=None,
                   help="the web console's port, consolePort (default 8082; 0 any free port, -1 none)")

    p = sub.add_parser("namesrv", help="a NameServer")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("-p", "--port", type=_port(0), default=9876)
    p.add_argument("--data-dir")
    p.add_argument("--acl-enable", action="store_true",
                   help="refuse REGISTER_BROKER and route/KV writes but from admin accounts (docs/acl.md)")
    p.add_argument("--acl-file", help="the ACL file (default $ROCKETMQ_HOME or the data dir, + conf/plain_acl.yml)")
    p.add_argument("-c", "--config", help="properties file: remoting limits and tls.* keys")
    p.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a config key (repeatable)")

    p = sub.add_parser("broker", help="a Broker")
    _add_broker_options(p)
    p.add_argument("-n", "--namesrv", help="NameServer address(es), HOST:PORT;HOST:PORT")
    p.add_argument("--broker-port", type=_port(0), default=None)

    p = sub.add_parser("console", help="the web console in front of a NameServer and its brokers (docs/console.md)")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=_port(0), default=DEFAULT_CONSOLE_PORT, help="consolePort (default 8082; 0 any free port)")
    p.add_argument("--allowed-host", action="append", default=[], metavar="NAME",
                   help="a host name the console answers to besides IP addresses and localhost (repeatable)")
    from tidalmq.admin_cli import add_connection_options

    add_connection_options(p)
    p.add_argument("--namesrv-domain", metavar="HOST[:PORT]",
                   help="without -n: ask this NameServer address server for the list, and again every two minutes "
                        "(RocketMQ's rocketmq.namesrv.domain; default $rocketmq.namesrv.domain)")
    p.add_argument("--namesrv-domain-subgroup", metavar="NAME",
                   help="the address server's path /rocketmq/NAME (default nsaddr)")

    p = sub.add_parser("proxy", help="the gRPC endpoint (RocketMQ 5 clients) in front of a cluster")
    p.add_argument("-n", "--namesrv", help="NameServer address(es), HOST:PORT;HOST:PORT")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p.add_argument("--grpc-port", type=_port(-1), default=None, help="grpcServerPort (default 8081; 0 any free port)")
    p.add_argument("-c", "--config", help="properties file: grpcServerPort, namesrvAddr, aclEnable, tls.* keys")
    p.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a config key (repeatable)")

    p = sub.add_parser("cluster", help="a local trial cluster: 2 NameServers, N broker groups x R replicas, "
                                       "each its own process (docs/cluster.md)")
    p.add_argument("--groups", type=int, default=2, help="broker groups (broker-a, broker-b, ...; default 2)")
    p.add_argument("--replicas", type=int, default=2, help="replicas per group (default 2)")
    p.add_argument("--controller", action="store_true",
                   help="controller mode: the master elected through etcd (started here unless --etcd-endpoints)")
    p.add_argument("--etcd-endpoints", help="controllerEtcdEndpoints of an etcd already running")
    p.add_argument("--master-role", choices=["SYNC_MASTER", "ASYNC_MASTER"],
                   help="the masters' brokerRole (default SYNC_MASTER with replicas, else ASYNC_MASTER)")
    p.add_argument("--data-dir", help="one sub-directory per process (default $TIDALMQ_HOME/cluster)")
    p.add_argument("--base-port", type=_port(1), default=9876,
                   help="NameServers on P and P+1, etcd P+2/P+3, brokers from P+10 by 10 (default 9876)")
    p.add_argument("--host", default="127.0.0.1", help="address every process binds (default 127.0.0.1)")
    p.add_argument("--set", action="append", metavar="KEY=VALUE", help="a key for every broker.conf (repeatable)")

    from tidalmq.admin_cli import add_admin_parser

    add_admin_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = make_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=getattr(logging, str(args.log_level).upper(), logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    _install_uvloop()
    try:
        if args.cmd == "standalone":
            return asyncio.run(_standalone(args))
        if args.cmd == "namesrv":
            return asyncio.run(_namesrv(args))
        if args.cmd == "broker":
            return asyncio.run(_broker(args))
        if args.cmd == "cluster":
            return asyncio.run(_cluster(args))
        if args.cmd == "proxy":
            return asyncio.run(_proxy(args))
        if args.cmd == "console":
            return asyncio.run(_console(args))
        if args.cmd == "admin":
            from tidalmq.admin_cli import run_admin

            return asyncio.run(run_admin(args))
    except (ConfigError, AclConfigError) as e:
        print(f"tidalmq: configuration error: {e}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # The reader of our output went away (`tidalmq admin dlq list G | head`): not an error.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except OSError as e:
        print(f"tidalmq: {e}", file=sys.stderr)
        return 1
    parser.error(f"unknown command {args.cmd}")
    return 2


if __name__ == "__main__":
    sys.exit(main())

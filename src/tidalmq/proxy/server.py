"""Serving MessagingService on grpcio's asyncio server, plain, TLS, or both on one port (the broker's
tls.* keys; permissive: proxy/permissive.py)."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import grpc
from tidalmq.acl import PlainAccessValidator, SessionCredentials
from tidalmq.proxy.config import ProxyConfig
from tidalmq.proxy.handlers import generic_handler
from tidalmq.proxy.permissive import LOOPBACK, PermissiveFront
from tidalmq.proxy.service import MessagingService
from tidalmq.remoting.tls import TlsConfig, client_context_from

log = logging.getLogger(__name__)


def server_credentials(tls: TlsConfig) -> grpc.ServerCredentials | None:
    """The TLS credentials of the gRPC port (tls.server.certPath / keyPath) when tls.server.mode is
    enforcing or permissive (None: plain only; permissive without a certificate serves plain).
    ``tls.server.need.client.auth=require`` asks clients for a certificate signed by
    tls.server.trustCertPath (the 5.x clients present none: only for other gRPC clients)."""
    if tls.server_mode not in ("enforcing", "permissive") or not (tls.server_cert_path and tls.server_key_path):
        return None
    key = Path(tls.server_key_path).read_bytes()
    cert = Path(tls.server_cert_path).read_bytes()
    if tls.server_need_client_auth == "require" and tls.server_trust_cert_path:
        trust = Path(tls.server_trust_cert_path).read_bytes()
        return grpc.ssl_server_credentials([(key, cert)], root_certificates=trust, require_client_auth=True)
    return grpc.ssl_server_credentials([(key, cert)])


class GrpcServer:
    def __init__(self, host: str, namesrv_addr: str, config: ProxyConfig, tls: TlsConfig | None = None, *,
                 acl: PlainAccessValidator | None = None, credentials: SessionCredentials | None = None,
                 watch_acl: bool = False) -> None:
        """``watch_acl``: reload ``acl`` when its files change (not when the broker beside already does)."""
        self.host = host
        self.config = config
        self.service = MessagingService(namesrv_addr, config, acl, credentials,
                                        client_context_from(tls) if tls is not None else None)
        self._watch = acl.watch if watch_acl and acl is not None else None
        self._watch_task: asyncio.Task[None] | None = None
        self.tls = tls
        self.port = 0
        self._server: grpc.aio.Server | None = None
        self.front: PermissiveFront | None = None  # tls.server.mode=permissive with a certificate

    async def start(self) -> None:
        await self.service.start()
        server = grpc.aio.server(options=[("grpc.max_receive_message_length", self.config.max_message_size + (1 << 20))])
        # requests decoded by the endpoint, after the caller is authenticated (proxy/handlers.py)
        server.add_generic_rpc_handlers((generic_handler(self.service),))
        addr = f"{self.host}:{self.config.grpc_server_port}"
        creds = server_credentials(self.tls) if self.tls is not None else None
        permissive = creds is not None and self.tls is not None and self.tls.server_mode == "permissive"
        if permissive:  # both on one port: grpcio listens on loopback, the front splices to it
            plain_port = server.add_insecure_port(f"{LOOPBACK}:0")
            tls_port = server.add_secure_port(f"{LOOPBACK}:0", creds)
        elif creds is not None:
            self.port = server.add_secure_port(addr, creds)
        else:
            self.port = server.add_insecure_port(addr)
        await server.start()
        self._server = server
        if permissive:
            front = PermissiveFront(self.host, self.config.grpc_server_port, plain_port, tls_port)
            try:
                await front.start()
            except OSError:
                await server.stop(None)
                raise
            self.front = front
            self.port = front.port
            self.service.access.peer_of = front.real_peer
        if self._watch is not None:
            self._watch_task = asyncio.get_running_loop().create_task(self._watch())
        log.info("gRPC endpoint on %s:%d (%s)", self.host, self.port,
                 "plain and TLS" if permissive else "TLS" if creds else "plain")

    async def stop(self) -> None:
        if self.front is not None:
            await self.front.stop()
        if self._watch_task is not None:
            self._watch_task.cancel()
        if self._server is not None:
            await self._server.stop(grace=1.0)
        await self.service.stop()

"""Who may make a gRPC call (RocketMQ's proxy: authentication, then authorization), against the ACL
the endpoint was given; each activity asks it before it does anything."""

from __future__ import annotations

from collections.abc import Callable

import grpc
from tidalmq.acl import PlainAccessValidator
from tidalmq.proxy import auth
from tidalmq.proxy.protocol import definition_pb2 as pb
from tidalmq.proxy.response import status

Code = pb.Code
CLIENT_ID = "x-mq-client-id"


def _same_peer(peer: str) -> str:
    return peer


def client_id(context: grpc.aio.ServicerContext) -> str:
    return auth.metadata_dict(context.invocation_metadata()).get(CLIENT_ID, "")


class AccessCheck:
    """``acl``: when set, every call must carry the credentials of an account of that ACL, allowed what
    the call touches (UNAUTHORIZED / FORBIDDEN otherwise)."""

    def __init__(self, acl: PlainAccessValidator | None) -> None:
        self.acl = acl
        # grpcio's context.peer() -> the client's: the permissive port's splice sets it (proxy/permissive.py)
        self.peer_of: Callable[[str], str] = _same_peer

    def refusal(self, context: grpc.aio.ServicerContext, needed: dict[str, int]) -> pb.Status | None:
        """Why the ACL refuses this call (None: it passes, or there is no ACL). An unknown account or a
        bad signature is UNAUTHORIZED, a known account lacking the permission FORBIDDEN."""
        if self.acl is None:
            return None
        md = auth.metadata_dict(context.invocation_metadata())
        parsed = auth.parse_authorization(md.get(auth.AUTHORIZATION, ""))
        date_time = md.get(auth.DATE_TIME)
        result = self.acl.check_signed(
            auth.peer_host(self.peer_of(context.peer() or "")), parsed.access_key if parsed else None,
            lambda account: parsed is not None and auth.verify(parsed, account.secret_key, date_time), needed)
        if result is None:
            return None
        authenticated, why = result
        return status(Code.FORBIDDEN if authenticated else Code.UNAUTHORIZED, why)

"""The MessagingService's method handlers for grpcio, made here instead of by the generated
``add_MessagingServiceServicer_to_server``, so that the endpoint, not grpcio, decodes each request.

grpcio decodes a request before the method runs: a body that is not the method's protobuf was logged
with a full traceback and answered with grpcio's own error, before any credentials were looked at. Here
a request arrives as bytes; with ACL on its caller is authenticated first (from the call's metadata
alone), then the body is decoded, and one that does not decode is answered BAD_REQUEST in the
response's Status, as RocketMQ's proxy answers a request it cannot read. A method the endpoint does not
serve answers NOT_IMPLEMENTED the same way. What input provokes is logged in one short line per
method every 10 s at most (LogLimiter), never with a traceback.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any

from google.protobuf.message import DecodeError

import grpc
from tidalmq.common.log_limit import LogLimiter, short_error
from tidalmq.proxy.protocol import definition_pb2 as pb
from tidalmq.proxy.protocol import service_pb2 as sv

if TYPE_CHECKING:
    from tidalmq.proxy.service import MessagingService

log = logging.getLogger(__name__)
_limited = LogLimiter(log)

SERVICE = "apache.rocketmq.v2.MessagingService"
# Methods of the service that the endpoint does not serve (docs/grpc.md): the 5.x clients do not call them.
NOT_SERVED = frozenset(("PullMessage", "UpdateOffset", "GetOffset", "QueryOffset"))


def _status(code: int, message: str) -> pb.Status:
    return pb.Status(code=code, message=message)


class _Method:
    def __init__(self, service: MessagingService, name: str, request_type: Any, response_type: Any) -> None:
        self.service = service
        self.name = name
        self.request_type = request_type
        self.response_type = response_type

    def refused(self, context: grpc.aio.ServicerContext) -> Any | None:
        """The answer to a caller the ACL does not know (None: no ACL, or authenticated): before the
        body is decoded, so nothing of it is parsed for a stranger."""
        if self.service.access.acl is None:
            return None
        refused = self.service.access.refusal(context, {})
        return None if refused is None else self.response_type(status=refused)

    def decode(self, raw: bytes) -> Any:
        """The request, or the answer to a body that does not decode."""
        try:
            return self.request_type.FromString(raw), None
        except (DecodeError, ValueError, RuntimeError) as e:  # RuntimeError: recursion limit of nested messages
            _limited.warning(("decode", self.name), "gRPC %s: a request that does not decode (%s)",
                             self.name, short_error(e))
            return None, self.response_type(status=_status(
                pb.Code.BAD_REQUEST, f"the request is not a valid {self.request_type.DESCRIPTOR.name}"))

    def failed(self, e: BaseException) -> Any:
        _limited.warning(("failed", self.name), "gRPC %s failed: %s", self.name, short_error(e))
        return self.response_type(status=_status(pb.Code.INTERNAL_SERVER_ERROR, f"{self.name} failed"))

    def not_served(self) -> Any:
        _limited.warning(("not served", self.name), "gRPC %s called: not served by this endpoint", self.name)
        return self.response_type(status=_status(pb.Code.NOT_IMPLEMENTED, f"{self.name} is not implemented"))


def _unary(m: _Method, call: Callable[[Any, Any], Awaitable[Any]] | None) -> Callable[..., Awaitable[Any]]:
    async def handle(raw: bytes, context: grpc.aio.ServicerContext) -> Any:
        if (refused := m.refused(context)) is not None:
            return refused
        request, bad = m.decode(raw)
        if bad is not None:
            return bad
        if call is None:
            return m.not_served()
        try:
            return await call(request, context)
        except Exception as e:  # a bug must not become grpcio's traceback and exception text
            return m.failed(e)
    return handle


def _server_stream(m: _Method, call: Callable[[Any, Any], AsyncIterator[Any]] | None
                   ) -> Callable[..., AsyncIterator[Any]]:
    async def handle(raw: bytes, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
        if (refused := m.refused(context)) is not None:
            yield refused
            return
        request, bad = m.decode(raw)
        if bad is not None:
            yield bad
            return
        if call is None:
            yield m.not_served()
            return
        try:
            async for out in call(request, context):
                yield out
        except Exception as e:
            yield m.failed(e)
    return handle


def _bidi_stream(m: _Method, call: Callable[[Any, Any], AsyncIterator[Any]]) -> Callable[..., AsyncIterator[Any]]:
    """Telemetry: its commands decoded one by one as the method reads them (it authenticates before it
    reads any); a command that does not decode ends the stream with BAD_REQUEST."""
    async def handle(raw_commands: AsyncIterator[bytes], context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
        bad: list[Any] = []

        async def commands() -> AsyncIterator[Any]:
            async for raw in raw_commands:
                command, answer = m.decode(raw)
                if answer is not None:
                    bad.append(answer)
                    return
                yield command

        try:
            async for out in call(commands(), context):
                yield out
        except Exception as e:
            yield m.failed(e)
            return
        if bad:
            yield bad[0]
    return handle


def generic_handler(service: MessagingService) -> grpc.GenericRpcHandler:
    """The handlers of every method of MessagingService, answered by ``service`` (MessagingService)."""
    handlers: dict[str, grpc.RpcMethodHandler] = {}
    for md in sv.DESCRIPTOR.services_by_name["MessagingService"].methods:
        request_type, response_type = getattr(sv, md.input_type.name), getattr(sv, md.output_type.name)
        m = _Method(service, md.name, request_type, response_type)
        call = service.rpc(md.name)
        assert (call is None) == (md.name in NOT_SERVED), md.name
        serialize = response_type.SerializeToString
        if md.client_streaming:
            assert call is not None
            handlers[md.name] = grpc.stream_stream_rpc_method_handler(_bidi_stream(m, call),
                                                                      response_serializer=serialize)
        elif md.server_streaming:
            handlers[md.name] = grpc.unary_stream_rpc_method_handler(_server_stream(m, call),
                                                                     response_serializer=serialize)
        else:
            handlers[md.name] = grpc.unary_unary_rpc_method_handler(_unary(m, call), response_serializer=serialize)
    return grpc.method_handlers_generic_handler(SERVICE, handlers)

"""The Status a gRPC call answers with (RocketMQ's proxy ResponseBuilder): OK, or the status code of
a failure met while the call talked to the NameServer and brokers."""

from __future__ import annotations

import logging

from tidalmq.client import validators
from tidalmq.client.errors import MQBrokerError, MQClientError
from tidalmq.proxy import convert
from tidalmq.proxy.lite import LiteError
from tidalmq.proxy.protocol import definition_pb2 as pb

log = logging.getLogger(__name__)
Code = pb.Code


def status(code: int = Code.OK, message: str = "OK") -> pb.Status:
    return pb.Status(code=code, message=message)


def error_status(e: BaseException) -> pb.Status:
    """The status of a failed call to the brokers."""
    if isinstance(e, convert.ConvertError | LiteError):
        return status(e.code, str(e))
    if isinstance(e, validators.ValidationError):
        return status(Code.BAD_REQUEST, str(e))
    if isinstance(e, MQBrokerError):
        return status(convert.grpc_code(e.code, e.remark or ""), e.remark or str(e))
    if isinstance(e, MQClientError):
        if "No route info" in str(e):
            return status(Code.TOPIC_NOT_FOUND, str(e))
        return status(Code.PROXY_TIMEOUT if isinstance(e.__cause__, TimeoutError) else Code.INTERNAL_SERVER_ERROR, str(e))
    if isinstance(e, TimeoutError):
        return status(Code.PROXY_TIMEOUT, "the broker did not answer in time")
    log.exception("gRPC call failed", exc_info=e)
    return status(Code.INTERNAL_SERVER_ERROR, f"{type(e).__name__}: {e}")


def topic_not_found(topic: str) -> pb.Status:
    return status(Code.TOPIC_NOT_FOUND, f"topic[{topic}] not exist")

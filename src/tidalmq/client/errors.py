"""Client exceptions. Every one carries RocketMQ's response code and remark (``.code``, ``.remark``).

Codes from a broker or NameServer are RocketMQ's ``ResponseCode`` values; failures that happen on the
client side use RocketMQ's ``ClientErrorCode`` values (10001 connect failed ... 10006 request timeout)
or ``-1`` for misuse of the API (not started, already shut down, illegal argument).
"""

from __future__ import annotations

from tidalmq.remoting.transport import RemotingError

# ClientErrorCode.java
CONNECT_BROKER_EXCEPTION = 10001
ACCESS_BROKER_TIMEOUT = 10002
BROKER_NOT_EXIST_EXCEPTION = 10003
NO_NAME_SERVER_EXCEPTION = 10004
NOT_FOUND_TOPIC_EXCEPTION = 10005
REQUEST_TIMEOUT_EXCEPTION = 10006
ILLEGAL_ARGUMENT = -1


class MQClientError(RemotingError):
    """A request the client could not complete (MQClientException): ``code`` and ``remark``."""


class MQBrokerError(MQClientError):
    """The broker (or NameServer) answered with an error code (MQBrokerException)."""

    def __init__(self, code: int, remark: str | None, addr: str | None = None) -> None:
        super().__init__(code, remark)
        self.addr = addr

    def __str__(self) -> str:
        where = f" (from {self.addr})" if self.addr else ""
        return f"CODE: {self.code} DESC: {self.remark or ''}{where}"


class IllegalStateError(MQClientError):
    """A call the client's state does not allow: before ``start()`` or after ``shutdown()``."""

    def __init__(self, remark: str) -> None:
        super().__init__(ILLEGAL_ARGUMENT, remark)


class ValidationError(MQClientError, ValueError):
    """An argument refused before anything went to the network (RocketMQ's Validators)."""

    def __init__(self, remark: str, code: int = 13) -> None:  # ResponseCode.MESSAGE_ILLEGAL
        super().__init__(code, remark)


class SendTimeoutError(MQClientError):
    """The send did not complete within ``send_timeout`` (retries included)."""

    def __init__(self, remark: str) -> None:
        super().__init__(REQUEST_TIMEOUT_EXCEPTION, remark)

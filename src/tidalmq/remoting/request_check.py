"""Requests checked where they enter, before any processor runs, from their declaration
(remoting/protocol/requests.py): each header's fields with their kinds and ranges, each JSON body that
carries names. A request that fails gets SYSTEM_ERROR with a remark saying which field and why, as
RocketMQ answers a header it cannot decode or a topic TopicValidator refuses; the processor never sees it.
A request that passes reaches its processor with its header parsed (``serve``). Names are judged by
``common.naming`` alone.
"""

from __future__ import annotations

from collections.abc import Callable

from tidalmq.remoting.codes import ResponseCode
from tidalmq.remoting.command import RemotingCommand
from tidalmq.remoting.protocol.bodies import json_object
from tidalmq.remoting.protocol.header import H, Header, RequestError
from tidalmq.remoting.protocol.requests import REQUESTS, Request, form_of
from tidalmq.remoting.transport import Connection, RemotingServer, Reply

# A processor of a declared request: called with the request's header parsed.
Handler = Callable[[Connection, RemotingCommand, H], Reply]


def _body_checked(request: Request[H], header: Header, cmd: RemotingCommand) -> None:
    # A compressed registration body is refused by its processor; nothing to read here.
    if request.body is not None and not getattr(header, "compressed", False):
        request.body(json_object(cmd.body_bytes()))


def parse_request(request: Request[H], cmd: RemotingCommand) -> H:
    """``cmd``'s header, its fields and body checked (RequestError says why not)."""
    code = request.code
    ext = cmd.ext_fields
    header = request.header.parse(ext, form_of(code, ext))
    _body_checked(request, header, cmd)
    return header


def check_request(cmd: RemotingCommand) -> str | None:
    """Why ``cmd`` is refused before its processor, or None when its names and numbers are legal (or its
    code declares nothing)."""
    request = REQUESTS.get(cmd.code)
    if request is None:
        return None
    try:
        parse_request(request, cmd)
    except RequestError as e:
        return str(e)
    return None


def serve(server: RemotingServer, request: Request[H], handler: Handler[H]) -> None:
    """Register ``handler`` for ``request``'s code: it is called with the header parsed; a request whose
    header or body is refused is answered SYSTEM_ERROR with the reason (every server registers so)."""
    parse = request.header.parse
    code = request.code
    body = request.body

    def checked(conn: Connection, cmd: RemotingCommand) -> Reply:
        ext = cmd.ext_fields
        try:
            header = parse(ext, form_of(code, ext))
            if body is not None:
                _body_checked(request, header, cmd)
        except RequestError as e:
            return cmd.make_response(ResponseCode.SYSTEM_ERROR, str(e))
        return handler(conn, cmd, header)

    server.register(code, checked)

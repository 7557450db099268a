"""JSON as RocketMQ's Java side writes it (fastjson), and a reader tolerant of its quirks.

fastjson writes maps with integer keys unquoted (``"brokerAddrs":{0:"127.0.0.1:10911"}``), which
is not JSON, and maps with object keys as the object itself (a ConsumeStats' ``offsetTable`` keyed by
MessageQueue: ``{{"brokerName":"b","queueId":0,"topic":"T"}:{...}}``). We write the same bytes so clients
that expect the quirk see it (``RawKey``), and read either form: an object key comes back as its JSON text.
"""

from __future__ import annotations

import json
from typing import Any


class RawKey(str):
    """A map key written as it is: the JSON of an object, as fastjson writes an object key."""


def object_key(obj: dict[str, Any]) -> RawKey:
    return RawKey(dumps(obj))


def _encode(obj: Any, out: list[str]) -> None:
    if isinstance(obj, dict):
        out.append("{")
        first = True
        for k, v in obj.items():
            if not first:
                out.append(",")
            first = False
            if isinstance(k, RawKey):
                out.append(k)
            elif isinstance(k, bool):
                out.append(json.dumps(str(k).lower()))
            elif isinstance(k, int):
                out.append(str(k))
            else:
                out.append(json.dumps(str(k), ensure_ascii=False))
            out.append(":")
            _encode(v, out)
        out.append("}")
    elif isinstance(obj, list | tuple | set | frozenset):
        out.append("[")
        for i, v in enumerate(obj):
            if i:
                out.append(",")
            _encode(v, out)
        out.append("]")
    else:
        out.append(json.dumps(obj, ensure_ascii=False))


def dumps(obj: Any) -> str:
    out: list[str] = []
    _encode(obj, out)
    return "".join(out)


def dumpb(obj: Any) -> bytes:
    return dumps(obj).encode("utf-8")


def _quote_numeric_keys(text: str) -> str:
    """Quote bare numeric object keys, leaving string literals alone."""
    out: list[str] = []
    i, n = 0, len(text)
    expect_key = False
    while i < n:
        c = text[i]
        if c == '"':
            j = i + 1
            while j < n:
                if text[j] == "\\":
                    j += 2
                    continue
                if text[j] == '"':
                    break
                j += 1
            out.append(text[i : j + 1])
            i = j + 1
            expect_key = False
            continue
        if expect_key and c == "{":
            end = _object_end(text, i)
            k = end
            while k < n and text[k] in " \t\r\n":
                k += 1
            if k < n and text[k] == ":":  # an object used as a key: its text, quoted
                out.append(json.dumps(_quote_numeric_keys(text[i:end])))
                i = end
                expect_key = False
                continue
        if c in "{,":
            out.append(c)
            i += 1
            expect_key = True
            continue
        if expect_key and (c == "-" or c.isdigit()):
            j = i + 1
            while j < n and text[j].isdigit():
                j += 1
            k = j
            while k < n and text[k] in " \t\r\n":
                k += 1
            if k < n and text[k] == ":":
                out.append('"' + text[i:j] + '"')
                i = j
                expect_key = False
                continue
        if not c.isspace():
            expect_key = False
        out.append(c)
        i += 1
    return "".join(out)


def _object_end(text: str, i: int) -> int:
    """The index after the object that opens at ``text[i]`` (strings skipped); the end if unbalanced."""
    depth, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == '"':
            i += 1
            while i < n and text[i] != '"':
                i += 2 if text[i] == "\\" else 1
        elif c in "{[":
            depth += 1
        elif c in "}]":
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    return n


def loads(data: bytes | str) -> Any:
    text = str(data, "utf-8") if isinstance(data, bytes | bytearray | memoryview) else data
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return json.loads(_quote_numeric_keys(text))

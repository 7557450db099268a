"""RemotingCommand frames: a pure codec, bytes in and commands out, and back.

Frame::

    length (4, big-endian, of everything after it)
    serialize type (1: 0 JSON, 1 ROCKETMQ binary) | header length (3)
    header
    body

The JSON header is ``{"code", "language", "version", "opaque", "flag", "remark", "extFields"}``.
The ROCKETMQ binary header is code (2), language (1), version (2), opaque (4), flag (4),
remark (4-byte length + utf-8), extFields (4-byte length, then 2-byte key length + key,
4-byte value length + value). A response goes back in its request's serialization.

``FrameDecoder`` is an incremental decoder in the style of h11: feed it bytes, take out commands.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from enum import IntEnum

from tidalmq.remoting.codes import LanguageCode

FLAG_RESPONSE = 1 << 0
FLAG_ONEWAY = 1 << 1

# Largest frame accepted (RocketMQ's default maxFrameLength is 16 MiB).
DEFAULT_MAX_FRAME = 16 * 1024 * 1024

_LEN = struct.Struct(">I")
_PREFIX = struct.Struct(">II")
_RMQ_FIXED = struct.Struct(">hbhii")
_INT = struct.Struct(">i")
_SHORT = struct.Struct(">H")
_CURRENT_VERSION = 399  # a 4.9-era version number, what older clients expect to see


class SerializeType(IntEnum):
    JSON = 0
    ROCKETMQ = 1


class FrameError(ValueError):
    """A frame that cannot be decoded; the connection it came from cannot be trusted further."""


@dataclass(slots=True)
class RemotingCommand:
    code: int
    opaque: int = 0
    flag: int = 0
    remark: str | None = None
    ext_fields: dict[str, str] = field(default_factory=dict)
    body: bytes | memoryview | list[memoryview] | None = None
    language: int = LanguageCode.PYTHON
    version: int = _CURRENT_VERSION
    serialize_type: SerializeType = SerializeType.JSON

    @property
    def is_response(self) -> bool:
        return bool(self.flag & FLAG_RESPONSE)

    @property
    def is_oneway(self) -> bool:
        return bool(self.flag & FLAG_ONEWAY)

    def body_bytes(self) -> bytes:
        b = self.body
        if b is None:
            return b""
        if isinstance(b, list):
            return b"".join(b)
        return bytes(b)

    def make_response(self, code: int, remark: str | None = None, ext_fields: dict[str, str] | None = None,
                      body: bytes | memoryview | list[memoryview] | None = None) -> RemotingCommand:
        """A response to this request: same opaque and serialization, the response flag set."""
        return RemotingCommand(
            code=int(code),
            opaque=self.opaque,
            flag=FLAG_RESPONSE,
            remark=remark,
            ext_fields=ext_fields if ext_fields is not None else {},
            body=body,
            language=LanguageCode.JAVA,
            version=self.version,
            serialize_type=self.serialize_type,
        )


def _str_fields(ext: dict[str, object]) -> dict[str, str]:
    out: dict[str, str] = {}
    for k, v in ext.items():
        if v is None:
            continue
        if isinstance(v, bool):
            out[k] = "true" if v else "false"
        else:
            out[k] = str(v)
    return out


def _language_name(code: int) -> str:
    try:
        return LanguageCode(code).name
    except ValueError:
        return "OTHER"


def encode_header(cmd: RemotingCommand) -> bytes:
    ext = _str_fields(cmd.ext_fields)
    if cmd.serialize_type == SerializeType.ROCKETMQ:
        parts = [_RMQ_FIXED.pack(cmd.code, int(cmd.language), cmd.version, cmd.opaque, cmd.flag)]
        remark = (cmd.remark or "").encode("utf-8")
        parts.append(_INT.pack(len(remark)))
        parts.append(remark)
        kv = bytearray()
        for k, v in ext.items():
            kb, vb = k.encode("utf-8"), v.encode("utf-8")
            kv += _SHORT.pack(len(kb)) + kb + _INT.pack(len(vb)) + vb
        parts.append(_INT.pack(len(kv)))
        parts.append(bytes(kv))
        return b"".join(parts)
    obj: dict[str, object] = {
        "code": cmd.code,
        "language": _language_name(cmd.language),
        "version": cmd.version,
        "opaque": cmd.opaque,
        "flag": cmd.flag,
    }
    if cmd.remark is not None:
        obj["remark"] = cmd.remark
    obj["extFields"] = ext
    obj["serializeTypeCurrentRPC"] = "JSON"
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def encode_frame_parts(cmd: RemotingCommand) -> list[bytes | memoryview]:
    """The frame as a list of buffers, so large bodies (mapped-file slices) go out without a copy."""
    header = encode_header(cmd)
    body = cmd.body
    if body is None:
        bodies: list[bytes | memoryview] = []
    elif isinstance(body, list):
        bodies = body
    else:
        bodies = [body]
    body_len = sum(len(b) for b in bodies)
    prefix = _PREFIX.pack(4 + len(header) + body_len, (int(cmd.serialize_type) << 24) | len(header))
    return [prefix + header, *bodies]


def encode_frame(cmd: RemotingCommand) -> bytes:
    return b"".join(bytes(p) if isinstance(p, memoryview) else p for p in encode_frame_parts(cmd))


def _decode_json_header(raw: bytes | memoryview) -> RemotingCommand:
    try:
        obj = json.loads(bytes(raw))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise FrameError(f"header is not valid JSON: {e}") from None
    if not isinstance(obj, dict) or "code" not in obj:
        raise FrameError("JSON header lacks a code")
    lang = obj.get("language", "JAVA")
    try:
        language = LanguageCode[lang] if isinstance(lang, str) else int(lang)
    except KeyError:
        language = LanguageCode.OTHER
    ext = obj.get("extFields") or {}
    if not isinstance(ext, dict):
        raise FrameError("extFields is not an object")
    try:
        return RemotingCommand(
            code=int(obj["code"]),
            opaque=int(obj.get("opaque", 0)),
            flag=int(obj.get("flag", 0)),
            remark=obj.get("remark"),
            ext_fields=_str_fields(ext),
            language=language,
            version=int(obj.get("version", 0)),
            serialize_type=SerializeType.JSON,
        )
    except (TypeError, ValueError) as e:
        raise FrameError(f"bad header field: {e}") from None


def _decode_rocketmq_header(raw: bytes | memoryview) -> RemotingCommand:
    raw = bytes(raw)
    n = len(raw)
    try:
        code, language, version, opaque, flag = _RMQ_FIXED.unpack_from(raw, 0)
        pos = _RMQ_FIXED.size
        rlen = int.from_bytes(raw[pos : pos + 4], "big", signed=True)
        pos += 4
        if rlen < 0 or pos + rlen > n:
            raise FrameError("remark length out of range")
        remark = raw[pos : pos + rlen].decode("utf-8") if rlen else None
        pos += rlen
        elen = int.from_bytes(raw[pos : pos + 4], "big", signed=True)
        pos += 4
        end = pos + elen
        if elen < 0 or end > n:
            raise FrameError("extFields length out of range")
        ext: dict[str, str] = {}
        while pos < end:
            klen = (raw[pos] << 8) | raw[pos + 1]
            pos += 2
            k = raw[pos : pos + klen].decode("utf-8")
            pos += klen
            vlen = int.from_bytes(raw[pos : pos + 4], "big", signed=True)
            pos += 4
            if vlen < 0 or pos + vlen > end:
                raise FrameError("extField value length out of range")
            ext[k] = raw[pos : pos + vlen].decode("utf-8")
            pos += vlen
    except (struct.error, UnicodeDecodeError, IndexError) as e:
        raise FrameError(f"bad ROCKETMQ header: {e}") from None
    return RemotingCommand(
        code=code,
        opaque=opaque,
        flag=flag,
        remark=remark,
        ext_fields=ext,
        language=language,
        version=version,
        serialize_type=SerializeType.ROCKETMQ,
    )


def decode_frame_body(frame: bytes | memoryview) -> RemotingCommand:
    """Decode one frame without its leading 4-byte length."""
    if len(frame) < 4:
        raise FrameError("frame shorter than its header-length field")
    (mark,) = _LEN.unpack_from(frame, 0)
    stype = (mark >> 24) & 0xFF
    hlen = mark & 0xFFFFFF
    if 4 + hlen > len(frame):
        raise FrameError(f"header length {hlen} exceeds frame length {len(frame) - 4}")
    header = memoryview(frame)[4 : 4 + hlen]
    if stype == SerializeType.JSON:
        cmd = _decode_json_header(header)
    elif stype == SerializeType.ROCKETMQ:
        cmd = _decode_rocketmq_header(header)
    else:
        raise FrameError(f"unknown header serialization {stype}")
    body = frame[4 + hlen :]
    cmd.body = bytes(body) if len(body) else None
    return cmd


class FrameDecoder:
    """Incremental decoder: ``feed(data)`` then iterate ``commands()``."""

    def __init__(self, max_frame: int = DEFAULT_MAX_FRAME) -> None:
        self._buf = bytearray()
        self._max = max_frame

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        self._buf += data

    @property
    def buffered(self) -> int:
        return len(self._buf)

    def commands(self) -> Iterator[RemotingCommand]:
        buf = self._buf
        pos = 0
        try:
            while len(buf) - pos >= 4:
                (length,) = _LEN.unpack_from(buf, pos)
                if length > self._max:
                    raise FrameError(f"frame length {length} exceeds the maximum {self._max}")
                if length < 4:
                    raise FrameError(f"frame length {length} is too short")
                if len(buf) - pos - 4 < length:
                    break
                frame = bytes(buf[pos + 4 : pos + 4 + length])
                pos += 4 + length
                yield decode_frame_body(frame)
        finally:
            if pos:
                del buf[:pos]

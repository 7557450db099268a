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
import re
import struct
from collections.abc import Callable, Generator, Mapping
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
_RMQ_HEAD = struct.Struct(">hbhiii")  # the fixed part and the remark length, in one go
_INT = struct.Struct(">i")
_SHORT = struct.Struct(">H")
CURRENT_VERSION = 399  # MQVersion V4_9_3: the version this side writes in every header, what 4.x clients expect

# Encoded extFields key prefixes (2-byte length + utf-8 key), by key: the keys a broker and its
# clients send are a small fixed set. Bounded in count and key length; cleared when full.
_KEY_PREFIXES: dict[str, bytes] = {}
_KEY_PREFIXES_MAX = 1024
_KEY_PREFIX_MAX_LEN = 64


class SerializeType(IntEnum):
    JSON = 0
    ROCKETMQ = 1


_JSON = int(SerializeType.JSON)
_ROCKETMQ = int(SerializeType.ROCKETMQ)
_ST_JSON = SerializeType.JSON
_ST_ROCKETMQ = SerializeType.ROCKETMQ


_JAVA_LANGUAGE = LanguageCode.JAVA  # what a broker writes in its responses, as RocketMQ's does


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
    version: int = CURRENT_VERSION
    serialize_type: SerializeType = SerializeType.JSON
    # extFields already in the ROCKETMQ encoding (``encode_ext_fields``), sent before those of
    # ``ext_fields``: a client's header template (the constant fields of a send) is encoded once.
    # Only the ROCKETMQ serialization carries it; decoding never sets it.
    ext_encoded: bytes = b""

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
        # Positional, in the fields' order: every request is answered through here, and keyword
        # arguments (and the enum lookup) cost more than the object itself (docs/benchmarks.md).
        return RemotingCommand(int(code), self.opaque, FLAG_RESPONSE, remark,
                               ext_fields if ext_fields is not None else {}, body, _JAVA_LANGUAGE, self.version,
                               self.serialize_type)


def _str_fields(ext: Mapping[str, object]) -> dict[str, str]:
    out: dict[str, str] = {}
    for k, v in ext.items():
        if v is None:
            continue
        if isinstance(v, bool):
            out[k] = "true" if v else "false"
        else:
            out[k] = str(v)
    return out


def _all_str(ext: Mapping[str, object]) -> bool:
    for v in ext.values():
        if type(v) is not str:
            return False
    return True


_LANGUAGE_NAMES = {int(m): m.name for m in LanguageCode}
_LANGUAGE_BY_NAME = dict(LanguageCode.__members__)


def language_name(code: int) -> str:
    """RocketMQ's LanguageCode name of a header's language byte (OTHER for one it does not know)."""
    try:
        return LanguageCode(code).name
    except ValueError:
        return "OTHER"


def _key_prefix(k: str) -> bytes:
    kb = k.encode("utf-8")
    kp = _SHORT.pack(len(kb)) + kb
    if type(k) is str and len(kb) <= _KEY_PREFIX_MAX_LEN:
        if len(_KEY_PREFIXES) >= _KEY_PREFIXES_MAX:
            _KEY_PREFIXES.clear()
        _KEY_PREFIXES[k] = kp
    return kp


def encode_ext_fields(ext: Mapping[str, object], kv: bytearray | None = None) -> bytearray:
    """extFields in the ROCKETMQ header encoding (2-byte key length + key, 4-byte value length + value),
    appended to ``kv``; None values are left out, others turned into strings as ``_str_fields`` does."""
    if kv is None:
        kv = bytearray()
    prefixes = _KEY_PREFIXES
    pack_int = _INT.pack
    for k, v in ext.items():
        if type(v) is not str:  # what _str_fields does, in line
            if v is None:
                continue
            v = ("true" if v else "false") if isinstance(v, bool) else str(v)
        vb = v.encode("utf-8")
        kv += prefixes.get(k) or _key_prefix(k)
        kv += pack_int(len(vb))
        kv += vb
    return kv


class ExtFieldsTemplate:
    """extFields of a fixed shape in the ROCKETMQ encoding (for ``RemotingCommand.ext_encoded``): the
    keys of the changing fields and the whole of the constant ones are encoded once; ``encode(*values)``
    then costs one bytes %-format instead of a dict and a loop (a hot response such as SEND_MESSAGE's). The result
    decodes to the same fields as ``encode_ext_fields`` of the equivalent dict.

    ``encode`` (values as text) and ``encode_bytes`` (values as their utf-8 bytes: a recall handle is ASCII
    as it is made) are written out for the template's number of keys when it is made, one statement a value
    (``_unrolled``): a loop over the values measured about twice as slow (docs/benchmarks.md). A wrong
    number of values raises TypeError, as any call with the wrong number of arguments does."""

    __slots__ = ("_format", "encode", "encode_bytes")

    def __init__(self, keys: tuple[str, ...], const: Mapping[str, str] | None = None) -> None:
        # The constant fields first (what a decoder's prefix cache can reuse), then per key its encoded
        # name and two slots, the value's length and the value: one bytes %-format in C (a join of parts
        # built key by key cost half as much again). The fixed bytes may hold a "%": escaped.
        self._format = bytes(encode_ext_fields(const or {})).replace(b"%", b"%%") + b"".join(
            _key_prefix(k).replace(b"%", b"%%") + b"%b%b" for k in keys)
        self.encode: Callable[..., bytes] = _unrolled(self._format, len(keys), utf8=True)
        self.encode_bytes: Callable[..., bytes] = _unrolled(self._format, len(keys), utf8=False)


def _unrolled(fmt: bytes, count: int, *, utf8: bool) -> Callable[..., bytes]:
    """``fmt % (len(v0), v0, len(v1), v1, ...)`` of ``count`` values (utf-8 encoded first with ``utf8``)
    as a function written out for ``count``, as dataclasses writes its ``__init__``. Only the count and
    fixed names enter the source; the format (and the keys in it) is a value of its namespace."""
    names = [f"v{i}" for i in range(count)]
    encoded = "".join(f"    {n} = {n}.encode('utf-8')\n" for n in names) if utf8 else ""
    args = "".join(f"pack(len({n})), {n}, " for n in names)
    source = f"def encode({', '.join(names)}):\n{encoded}    return fmt % ({args})\n"
    namespace: dict[str, object] = {"fmt": fmt, "pack": _INT.pack}
    exec(source, namespace)  # noqa: S102 - generated from an int, see the docstring
    return namespace["encode"]  # type: ignore[return-value]


def _encode_rocketmq_header(cmd: RemotingCommand) -> bytes:
    remark = cmd.remark
    rb = remark.encode("utf-8") if remark else b""
    kv = encode_ext_fields(cmd.ext_fields, bytearray(cmd.ext_encoded)) if cmd.ext_fields else cmd.ext_encoded
    head = _RMQ_HEAD.pack(cmd.code, int(cmd.language), cmd.version, cmd.opaque, cmd.flag, len(rb))
    return b"".join((head, rb, _INT.pack(len(kv)), kv))


_JSON_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)


def encode_header(cmd: RemotingCommand) -> bytes:
    if cmd.serialize_type == _ROCKETMQ:
        return _encode_rocketmq_header(cmd)
    if cmd.ext_encoded:
        raise ValueError("pre-encoded extFields need the ROCKETMQ header serialization")
    ext = cmd.ext_fields
    if not _all_str(ext):
        ext = _str_fields(ext)
    language = cmd.language
    try:
        lang = _LANGUAGE_NAMES[language]
    except (KeyError, TypeError):
        lang = language_name(language)
    obj: dict[str, object] = {
        "code": cmd.code,
        "language": lang,
        "version": cmd.version,
        "opaque": cmd.opaque,
        "flag": cmd.flag,
    }
    if cmd.remark is not None:
        obj["remark"] = cmd.remark
    obj["extFields"] = ext
    obj["serializeTypeCurrentRPC"] = "JSON"
    return _JSON_ENCODER.encode(obj).encode("utf-8")


def encode_frame_parts(cmd: RemotingCommand) -> list[bytes | memoryview]:
    """The frame as a list of buffers, so large bodies (mapped-file slices) go out without a copy."""
    header = encode_header(cmd)
    hlen = len(header)
    body = cmd.body
    if body is None:
        return [_PREFIX.pack(4 + hlen, (int(cmd.serialize_type) << 24) | hlen) + header]
    if isinstance(body, list):
        body_len = 0
        for b in body:
            body_len += len(b)
        return [_PREFIX.pack(4 + hlen + body_len, (int(cmd.serialize_type) << 24) | hlen) + header, *body]
    return [_PREFIX.pack(4 + hlen + len(body), (int(cmd.serialize_type) << 24) | hlen) + header, body]


def encode_frame(cmd: RemotingCommand) -> bytes:
    return b"".join(bytes(p) if isinstance(p, memoryview) else p for p in encode_frame_parts(cmd))


_INT_MIN, _INT_MAX = -(2**31), 2**31 - 1


def _java_int(obj: dict[str, object], key: str, default: int) -> int:
    """A header field Java reads into an ``int``: an integer (or its decimal string, which fastjson
    also accepts) within Java's int range; anything else is a FrameError naming the field."""
    v = obj.get(key, default)
    if type(v) is int:
        n = v
    elif type(v) is str and len(v) <= 16 and v.isascii() and v.strip().lstrip("+-").isdigit():
        n = int(v)
    elif v is None:
        n = default
    else:
        raise FrameError(f"header field {key} is not an integer: {str(v)[:40]}")
    if not _INT_MIN <= n <= _INT_MAX:
        raise FrameError(f"header field {key} {str(n)[:40]} is out of Java's int range")
    return n


def _json_language(lang: object) -> int:
    if lang is None:
        return LanguageCode.JAVA
    if type(lang) is str:
        return _LANGUAGE_BY_NAME.get(lang, LanguageCode.OTHER)
    if type(lang) is int and 0 <= lang <= 0xFF:  # what the ROCKETMQ header's one byte can carry
        return lang
    raise FrameError(f"header field language is not a language name: {str(lang)[:40]}")


def _json_ext_fields(ext: object) -> dict[str, str]:
    if ext is None:
        return {}
    if not isinstance(ext, dict):
        raise FrameError("extFields is not an object")
    if _all_str(ext):
        return ext  # a fresh dict from json: no need to copy it
    for k, v in ext.items():
        if isinstance(v, dict | list) or (type(v) is float and v != v):
            raise FrameError(f"extField {k[:40]} is not a string")
    return _str_fields(ext)


def _decode_json_header(raw: bytes | memoryview) -> RemotingCommand:
    try:
        obj = json.loads(raw if type(raw) is bytes else bytes(raw))
    except ValueError as e:  # JSONDecodeError, UnicodeDecodeError, an integer of more than 4300 digits
        raise FrameError(f"header is not valid JSON: {str(e)[:120]}") from None
    except RecursionError:  # a deeply nested header: json's C scanner stops at the recursion limit
        raise FrameError("header JSON is nested too deeply") from None
    if not isinstance(obj, dict) or "code" not in obj:
        raise FrameError("JSON header lacks a code")
    remark = obj.get("remark")
    if remark is not None and type(remark) is not str:
        raise FrameError("header field remark is not a string")
    return RemotingCommand(
        _java_int(obj, "code", 0),
        _java_int(obj, "opaque", 0),
        _java_int(obj, "flag", 0),
        remark,
        _json_ext_fields(obj.get("extFields")),
        None,
        _json_language(obj.get("language", "JAVA")),
        _java_int(obj, "version", 0),
        _ST_JSON,
    )


# Header layouts already seen ("shapes"). A client's requests of one kind repeat their extFields' layout
# byte for byte but for the values' bytes: the same keys in the same order, each value as long as the last
# time (a producer's group, topic and flags; a 13-digit timestamp; properties whose names and values keep
# their lengths). A shape is a regex over the header's latin-1 text that matches each field's framing (key
# length, key, value length) literally and captures its value by length, named by its key: one C call checks
# a header against it and hands its fields back as a dict, cheaper than the scan it replaces. ASCII headers
# only (a latin-1 character is then a byte, and what utf-8 decodes). Kept per extFields length, at most
# _EXT_SHAPES_PER_LEN each, at most _EXT_SHAPES_MAX lengths (cleared when full). A layout is learned when a
# length's headers come twice in a row with the same value lengths, and at most once per
# _EXT_SCANS_PER_LEARN headers scanned: compiling one costs a hundred scans or so, so headers whose layout
# never repeats, or a client that changes its layout on purpose, cost a scan and a lookup each, and never
# more than a little compiling a header. Headers of more than _EXT_SHAPE_FIELDS_MAX fields are never
# learned: a compile grows with the fields, and RocketMQ's headers have a few dozen at most. The figures:
# docs/benchmarks.md, "Figures behind remoting's and the proxy's constants".
_EXT_SHAPES_MAX = 512
_EXT_SHAPE_FIELDS_MAX = 64
_EXT_SHAPES_PER_LEN = 4
_EXT_SCANS_PER_LEARN = 64
_EXT_SHAPES: dict[int, list[re.Pattern[str]]] = {}
_EXT_LAST_LENS: dict[int, tuple[int, ...]] = {}  # per extFields length, the value lengths last scanned
_ext_scans = _EXT_SCANS_PER_LEARN  # headers scanned since a layout was last learned (the first one at once)


def _decode_ext_fields(x: bytes, end: int) -> dict[str, str]:
    """The extFields in ``x[:end]`` (``x`` runs to the end of the header)."""
    shapes = _EXT_SHAPES.get(end)
    if shapes is not None and x.isascii():
        s = x.decode("latin-1")
        for shape in shapes:
            m = shape.fullmatch(s, 0, end)
            if m is not None:
                return m.groupdict()
    ext = _scan_ext_fields(x, end)
    _note_layout(x, end, ext)
    return ext


def _note_layout(x: bytes, end: int, ext: dict[str, str]) -> None:
    """A header ``x[:end]`` was scanned into ``ext``: learn its layout as a shape if it repeats (see
    _EXT_SHAPES). Not for a header of too many fields, one that is not ASCII, has a key that cannot name a
    regex group, or whose fields do not account for its bytes (a key sent twice: a shape of its fields would
    never match it)."""
    global _ext_scans
    _ext_scans += 1
    if len(ext) > _EXT_SHAPE_FIELDS_MAX:
        return
    lens = tuple(map(len, ext.values()))
    if _EXT_LAST_LENS.get(end) != lens:
        if len(_EXT_LAST_LENS) >= _EXT_SHAPES_MAX:
            _EXT_LAST_LENS.clear()
        _EXT_LAST_LENS[end] = lens
        return
    if _ext_scans < _EXT_SCANS_PER_LEARN or not x.isascii() or not all(map(str.isidentifier, ext)):
        return
    parts = []
    at = 0
    for k, v in ext.items():
        framing = _SHORT.pack(len(k)) + k.encode("ascii") + _INT.pack(len(v))
        parts.append(f"{re.escape(framing.decode('latin-1'))}(?P<{k}>.{{{len(v)}}})")
        at += len(framing) + len(v)
    if at != end:
        return
    _ext_scans = 0
    shape = re.compile("".join(parts), re.DOTALL)
    if len(_EXT_SHAPES) >= _EXT_SHAPES_MAX:
        _EXT_SHAPES.clear()
    # A new list, not the old one changed: a decoder on another thread may be going through that one.
    _EXT_SHAPES[end] = [*_EXT_SHAPES.get(end, ())[-(_EXT_SHAPES_PER_LEN - 1):], shape]


def _scan_ext_fields(x: bytes, end: int) -> dict[str, str]:
    """The extFields of ``x[:end]``. Lengths are read from x and strings are sliced out
    of its latin-1 decoding s, where byte and character offsets agree: an ASCII slice of s is what utf-8
    would have decoded; anything else is decoded again as utf-8."""
    s = x.decode("latin-1")
    unpack_int = _INT.unpack_from
    ext: dict[str, str] = {}
    p = 0
    try:
        if s.isascii():
            while p < end:
                k0 = p + 2  # key from k0 to k1, value length, value from v0 to p
                k1 = k0 + ((x[p] << 8) | x[p + 1])
                v0 = k1 + 4
                (vlen,) = unpack_int(x, k1)
                p = v0 + vlen
                if vlen < 0 or p > end:
                    raise FrameError("extField value length out of range")
                ext[s[k0:k1]] = s[v0:p]
        else:
            while p < end:
                k0 = p + 2
                k1 = k0 + ((x[p] << 8) | x[p + 1])
                k = s[k0:k1]
                if not k.isascii():
                    k = x[k0:k1].decode("utf-8")
                v0 = k1 + 4
                (vlen,) = unpack_int(x, k1)
                p = v0 + vlen
                if vlen < 0 or p > end:
                    raise FrameError("extField value length out of range")
                v = s[v0:p]
                ext[k] = v if v.isascii() else x[v0:p].decode("utf-8")
    except struct.error:  # a value length cut off by the end of the header
        raise FrameError("extField value length out of range") from None
    except (UnicodeDecodeError, IndexError) as e:
        raise FrameError(f"bad ROCKETMQ header: {e}") from None
    return ext


def all_ext_fields(cmd: RemotingCommand) -> dict[str, str]:
    """Every extField of ``cmd``: those pre-encoded in ``ext_encoded`` (decoded back), then ``ext_fields``."""
    ext = _scan_ext_fields(cmd.ext_encoded, len(cmd.ext_encoded)) if cmd.ext_encoded else {}
    ext.update(cmd.ext_fields)
    return ext


def _decode_rocketmq_header(raw: bytes | memoryview) -> RemotingCommand:
    if type(raw) is not bytes:
        raw = bytes(raw)
    n = len(raw)
    if n < 17:  # no room for the fixed part and the remark length
        try:
            _RMQ_FIXED.unpack_from(raw, 0)
        except struct.error as e:
            raise FrameError(f"bad ROCKETMQ header: {e}") from None
        raise FrameError("remark length out of range")
    code, language, version, opaque, flag, rlen = _RMQ_HEAD.unpack_from(raw, 0)
    pos = 17
    if rlen < 0 or pos + rlen > n:
        raise FrameError("remark length out of range")
    if rlen:
        try:
            remark: str | None = raw[pos : pos + rlen].decode("utf-8")
        except UnicodeDecodeError as e:
            raise FrameError(f"bad ROCKETMQ header: {e}") from None
        pos += rlen
    else:
        remark = None
    if pos + 4 > n:
        raise FrameError("extFields length out of range")
    (end,) = _INT.unpack_from(raw, pos)  # the extFields length, then their end in x below
    pos += 4
    if end < 0 or pos + end > n:
        raise FrameError("extFields length out of range")
    ext = _decode_ext_fields(raw[pos:], end) if end else {}
    return RemotingCommand(code, opaque, flag, remark, ext, None, language, version, _ST_ROCKETMQ)


def _copy(buf: bytes | bytearray | memoryview, start: int, end: int) -> bytes:
    """``bytes(buf[start:end])`` in a single copy, leaving no view of ``buf`` behind."""
    if type(buf) is bytes:
        return buf[start:end]
    if type(buf) is memoryview or end - start <= 4096:  # one copy; or, from a bytearray, two small ones
        return bytes(buf[start:end])
    with memoryview(buf) as mv:
        return mv[start:end].tobytes()


def _decode_frame(buf: bytes | bytearray | memoryview, start: int, end: int) -> RemotingCommand:
    """Decode the frame at ``buf[start:end]`` (without its leading 4-byte length)."""
    flen = end - start
    if flen < 4:
        raise FrameError("frame shorter than its header-length field")
    (mark,) = _LEN.unpack_from(buf, start)
    stype = (mark >> 24) & 0xFF
    hlen = mark & 0xFFFFFF
    if 4 + hlen > flen:
        raise FrameError(f"header length {hlen} exceeds frame length {flen - 4}")
    hstart = start + 4
    hend = hstart + hlen
    if stype == _ROCKETMQ:
        cmd = _decode_rocketmq_header(_copy(buf, hstart, hend))
    elif stype == _JSON:
        cmd = _decode_json_header(_copy(buf, hstart, hend))
    else:
        raise FrameError(f"unknown header serialization {stype}")
    if hend < end:
        cmd.body = _copy(buf, hend, end)
    return cmd


def decode_frame_body(frame: bytes | memoryview) -> RemotingCommand:
    """Decode one frame without its leading 4-byte length."""
    return _decode_frame(frame, 0, len(frame))


def frames_in(buf: bytes | bytearray | memoryview, start: int, end: int) -> Generator[RemotingCommand, None, None]:
    """The whole frames laid end to end in ``buf[start:end]``, each with its 4-byte length, decoded
    (FrameError for one that does not fit or decode)."""
    pos = start
    while pos < end:
        if end - pos < 4:
            raise FrameError("a frame's length cut off")
        (length,) = _LEN.unpack_from(buf, pos)
        first = pos + 4
        pos = first + length
        if pos > end:
            raise FrameError(f"frame length {length} runs past the frames")
        yield _decode_frame(buf, first, pos)


class FrameDecoder:
    """Incremental decoder: ``feed(data)`` then iterate ``commands()``."""

    def __init__(self, max_frame: int = DEFAULT_MAX_FRAME) -> None:
        self._buf = bytearray()
        self._max = max_frame
        # The frames the last commands() yielded stay in the buffer, up to _consumed, until the next feed
        # or commands(): until then frames_view can show them (decoded_to marks where they end).
        self._consumed = 0
        self.decoded_to = 0

    def drop_consumed(self) -> None:
        """Drop the frames the last ``commands()`` yielded now (the caller is done with their bytes)."""
        if self._consumed:
            del self._buf[:self._consumed]
            self._consumed = self.decoded_to = 0

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        self.drop_consumed()
        self._buf += data

    @property
    def buffered(self) -> int:
        return len(self._buf) - self._consumed

    def commands(self) -> Generator[RemotingCommand, None, None]:
        """The whole frames buffered, decoded one by one; stop early with ``close()``. The bytes of the
        frames yielded are dropped by the next ``feed`` or ``commands()`` (here, before the first frame is
        decoded: ``decoded_to`` is where the first one starts)."""
        self.drop_consumed()
        return self._commands()

    def _commands(self) -> Generator[RemotingCommand, None, None]:
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
                start = pos + 4
                pos = start + length
                # Straight out of the buffer: no view of it outlives the call, so it can still grow.
                cmd = _decode_frame(buf, start, pos)
                self.decoded_to = pos
                yield cmd
        finally:
            self._consumed = pos

    def frames_view(self, start: int, end: int) -> memoryview:
        """The raw frames between two ``decoded_to`` marks of the last ``commands()``. Release the view
        before the next ``feed`` or ``commands()`` (they trim the buffer, which a view would forbid)."""
        return memoryview(self._buf)[start:end]

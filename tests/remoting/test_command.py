"""The remoting codec, without sockets."""

from __future__ import annotations

import json
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidalmq.remoting.command import (
    FLAG_ONEWAY,
    FLAG_RESPONSE,
    ExtFieldsTemplate,
    FrameDecoder,
    FrameError,
    RemotingCommand,
    SerializeType,
    decode_frame_body,
    encode_frame,
)

texts = st.text(st.characters(blacklist_categories=("Cs",)), max_size=40)
commands = st.builds(
    RemotingCommand,
    code=st.integers(-32768, 32767),
    opaque=st.integers(0, 2**31 - 1),
    flag=st.sampled_from([0, FLAG_RESPONSE, FLAG_ONEWAY]),
    remark=st.one_of(st.none(), texts.filter(bool)),
    ext_fields=st.dictionaries(texts.filter(bool), texts, max_size=6),
    body=st.one_of(st.none(), st.binary(min_size=1, max_size=300)),
    language=st.integers(0, 12),
    version=st.integers(0, 1000),
    serialize_type=st.sampled_from(list(SerializeType)),
)


def roundtrip(cmd: RemotingCommand) -> RemotingCommand:
    frame = encode_frame(cmd)
    (length,) = struct.unpack(">I", frame[:4])
    assert length == len(frame) - 4
    return decode_frame_body(frame[4:])


@given(commands)
def test_roundtrip_both_serializations(cmd: RemotingCommand) -> None:
    out = roundtrip(cmd)
    assert (out.code, out.opaque, out.flag, out.ext_fields) == (cmd.code, cmd.opaque, cmd.flag, cmd.ext_fields)
    assert out.remark == cmd.remark
    assert out.body == cmd.body
    assert out.serialize_type == cmd.serialize_type
    if cmd.serialize_type == SerializeType.ROCKETMQ:
        assert (out.language, out.version) == (cmd.language, cmd.version)


@given(st.lists(commands, min_size=1, max_size=5), st.integers(1, 64))
def test_incremental_decoder_any_split(cmds: list[RemotingCommand], chunk: int) -> None:
    data = b"".join(encode_frame(c) for c in cmds)
    dec = FrameDecoder()
    out = []
    for i in range(0, len(data), chunk):
        dec.feed(data[i : i + chunk])
        out.extend(dec.commands())
    assert [c.opaque for c in out] == [c.opaque for c in cmds]
    assert dec.buffered == 0


def test_json_header_is_what_java_and_cpp_clients_parse() -> None:
    cmd = RemotingCommand(code=105, opaque=7, ext_fields={"topic": "T", "n": 3})  # type: ignore[dict-item]
    frame = encode_frame(cmd)
    mark = struct.unpack(">I", frame[4:8])[0]
    assert mark >> 24 == 0  # JSON
    header = json.loads(frame[8 : 8 + (mark & 0xFFFFFF)])
    assert header["code"] == 105 and header["opaque"] == 7
    assert header["extFields"] == {"topic": "T", "n": "3"}  # ext field values are strings on the wire


def test_decodes_a_cpp_client_header_with_integer_ext_values() -> None:
    header = json.dumps({"code": 310, "language": "CPP", "version": 0, "opaque": 3, "flag": 0, "remark": "",
                         "extFields": {"a": "PG", "d": 4, "e": 1, "k": "false"}}).encode()
    frame = struct.pack(">I", len(header)) + header + b"body"
    cmd = decode_frame_body(frame)
    assert cmd.ext_fields == {"a": "PG", "d": "4", "e": "1", "k": "false"}
    assert cmd.body == b"body"
    resp = cmd.make_response(0)
    assert resp.opaque == 3 and resp.is_response and resp.serialize_type == SerializeType.JSON


def test_rocketmq_binary_header_layout() -> None:
    cmd = RemotingCommand(code=11, opaque=9, flag=0, remark="r", ext_fields={"k": "v"}, language=0, version=1,
                          serialize_type=SerializeType.ROCKETMQ)
    frame = encode_frame(cmd)
    mark = struct.unpack(">I", frame[4:8])[0]
    assert mark >> 24 == 1
    h = frame[8:]
    assert struct.unpack(">hbhii", h[:13]) == (11, 0, 1, 9, 0)
    assert struct.unpack(">i", h[13:17]) == (1,) and h[17:18] == b"r"
    assert struct.unpack(">i", h[18:22]) == (2 + 1 + 4 + 1,)
    assert h[22:] == struct.pack(">H", 1) + b"k" + struct.pack(">i", 1) + b"v"


@pytest.mark.parametrize(
    "frame",
    [
        struct.pack(">I", 100),  # header length beyond the frame
        struct.pack(">I", (7 << 24) | 2) + b"{}",  # unknown serialization
        struct.pack(">I", 5) + b"notjs",
        struct.pack(">I", 2) + b"[]",
        struct.pack(">I", (1 << 24) | 3) + b"\x00\x01\x02",  # truncated binary header
        b"\x00",
    ],
)
def test_malformed_headers_raise_frame_error(frame: bytes) -> None:
    with pytest.raises(FrameError):
        decode_frame_body(frame)


def test_oversized_frame_is_refused_before_buffering_it() -> None:
    dec = FrameDecoder(max_frame=1024)
    dec.feed(struct.pack(">I", 1 << 30))
    with pytest.raises(FrameError, match="exceeds the maximum"):
        list(dec.commands())


def test_body_as_buffer_list_is_sent_without_joining() -> None:
    parts = [memoryview(b"abc"), memoryview(b"de")]
    cmd = RemotingCommand(code=0, flag=FLAG_RESPONSE, body=parts)
    out = roundtrip(cmd)
    assert out.body == b"abcde"


def test_rocketmq_non_ascii_and_long_fields_round_trip() -> None:
    # Non-ASCII keys and values, and lengths whose low byte is not ASCII (>= 128): the slow path.
    ext = {"ключ": "значение", "k": "v" * 200, "emoji": "\U0001f600" * 3, "a": "", "é": "x" * 130}
    for e in (ext, {"k": "v" * 200, "ascii": "only"}):
        cmd = RemotingCommand(code=310, remark="réponse", ext_fields=e, serialize_type=SerializeType.ROCKETMQ)
        out = roundtrip(cmd)
        assert out.ext_fields == e and list(out.ext_fields) == list(e)
        assert out.remark == "réponse"


def test_rocketmq_ext_values_are_stringified_like_json() -> None:
    ext = {"n": 3, "t": True, "f": False, "none": None, "s": "x"}
    for st_ in SerializeType:
        out = roundtrip(RemotingCommand(code=1, ext_fields=ext, serialize_type=st_))  # type: ignore[arg-type]
        assert out.ext_fields == {"n": "3", "t": "true", "f": "false", "s": "x"}


def test_key_prefix_cache_is_bounded() -> None:
    from tidalmq.remoting import command

    for i in range(command._KEY_PREFIXES_MAX + 10):
        cmd = RemotingCommand(code=1, ext_fields={f"key{i}": "v", "long" * 40: "w"},
                              serialize_type=SerializeType.ROCKETMQ)
        assert roundtrip(cmd).ext_fields == cmd.ext_fields
    assert 0 < len(command._KEY_PREFIXES) <= command._KEY_PREFIXES_MAX
    assert "long" * 40 not in command._KEY_PREFIXES


def _rmq_frame(payload: bytes) -> bytes:
    """A frame without its leading length, around a ROCKETMQ header and no body."""
    return struct.pack(">I", (1 << 24) | len(payload)) + payload


_FIXED = struct.pack(">hbhii", 11, 0, 1, 9, 0)


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        (_FIXED[:5], "bad ROCKETMQ header"),
        (_FIXED + b"\x00\x00", "remark length out of range"),
        (_FIXED + struct.pack(">i", 5) + b"ab", "remark length out of range"),
        (_FIXED + struct.pack(">i", 1) + b"\xff" + struct.pack(">i", 0), "bad ROCKETMQ header"),
        (_FIXED + struct.pack(">i", 0) + b"\x00\x00", "extFields length out of range"),
        (_FIXED + struct.pack(">ii", 0, 50) + b"\x00\x01a", "extFields length out of range"),
        (_FIXED + struct.pack(">ii", 0, 1) + b"\x00", "bad ROCKETMQ header: index out of range"),
        (_FIXED + struct.pack(">ii", 0, 5) + b"\x00\x01a\x00\x00", "extField value length out of range"),
        (_FIXED + struct.pack(">ii", 0, 8) + b"\x00\x01a\x00\x00\x00\x02v", "extField value length out of range"),
        (_FIXED + struct.pack(">ii", 0, 8) + b"\x00\x01a\xff\xff\xff\xffv", "extField value length out of range"),
        (_FIXED + struct.pack(">ii", 0, 8) + b"\x00\x01\xff\x00\x00\x00\x01v", "bad ROCKETMQ header"),
        (_FIXED + struct.pack(">ii", 0, 8) + b"\x00\x01k\x00\x00\x00\x01\xc3", "bad ROCKETMQ header"),
    ],
)
def test_malformed_rocketmq_headers_say_what_is_wrong(payload: bytes, message: str) -> None:
    frame = _rmq_frame(payload)
    with pytest.raises(FrameError, match=message):
        decode_frame_body(frame)
    dec = FrameDecoder()
    dec.feed(struct.pack(">I", len(frame)) + frame)
    with pytest.raises(FrameError, match=message):
        list(dec.commands())
    assert dec.buffered == 0  # the bad frame is dropped, and the buffer is not pinned by a view
    dec.feed(b"\x00")
    assert dec.buffered == 1


def test_decoded_bodies_are_bytes_and_large_ones_survive_the_incremental_decoder() -> None:
    body = bytes(range(256)) * 4096  # 1 MiB
    cmds = [RemotingCommand(code=i, opaque=i, body=body[: 1000 * i + 1], serialize_type=SerializeType.ROCKETMQ)
            for i in range(1, 4)] + [RemotingCommand(code=9, opaque=9, body=body)]
    data = b"".join(encode_frame(c) for c in cmds)
    assert type(decode_frame_body(memoryview(data)[4:]).body) is bytes
    dec = FrameDecoder()
    out: list[RemotingCommand] = []
    step = 65536
    chunks = [data[i : i + step] for i in range(0, len(data), step)]
    dec.feed(chunks.pop(0))
    while True:
        for c in dec.commands():
            out.append(c)
            if chunks:
                dec.feed(chunks.pop(0))  # the buffer can still grow while commands are taken out
        if not chunks:
            out.extend(dec.commands())
            break
        dec.feed(chunks.pop(0))
    assert [c.opaque for c in out] == [c.opaque for c in cmds]
    assert all(type(c.body) is bytes and c.body == o.body for c, o in zip(out, cmds, strict=True))
    assert dec.buffered == 0


@given(st.lists(texts.filter(bool), min_size=1, max_size=4, unique=True), st.data())
def test_ext_fields_template_decodes_to_the_fields_of_the_dict(keys: list[str], data: st.DataObject) -> None:
    const = data.draw(st.dictionaries(texts.filter(lambda k: bool(k) and k not in keys), texts, max_size=3))
    values = [data.draw(texts) for _ in keys]
    tmpl = ExtFieldsTemplate(tuple(keys), const)
    cmd = RemotingCommand(code=0, flag=FLAG_RESPONSE, serialize_type=SerializeType.ROCKETMQ,
                          ext_encoded=tmpl.encode(*values))
    assert roundtrip(cmd).ext_fields == {**dict(zip(keys, values, strict=True)), **const}
    assert tmpl.encode_bytes(*(v.encode("utf-8") for v in values)) == tmpl.encode(*values)


def test_ext_fields_template_refuses_the_wrong_number_of_values() -> None:
    tmpl = ExtFieldsTemplate(("msgId", "queueId"))
    with pytest.raises(ValueError, match="1 values for 2 keys"):
        tmpl.encode("x")
    with pytest.raises(ValueError, match="3 values for 2 keys"):
        tmpl.encode_bytes(b"x", b"y", b"z")


def test_ext_fields_template_writes_a_percent_sign_in_its_fixed_bytes_as_it_is() -> None:
    """The template is a bytes %-format: a "%" in a constant field, a key, or a length byte (37 is "%")
    is escaped in it, not taken for a slot."""
    keys = ("k%", "x" * 37)
    const = {"c%s": "%b%%", "y" * 37: "z" * 37}
    values = ("%s", "v" * 37)
    cmd = RemotingCommand(code=0, flag=FLAG_RESPONSE, serialize_type=SerializeType.ROCKETMQ,
                          ext_encoded=ExtFieldsTemplate(keys, const).encode(*values))
    assert roundtrip(cmd).ext_fields == {**dict(zip(keys, values, strict=True)), **const}


def _rmq_header(ext: bytes) -> bytes:
    return _rmq_frame(_FIXED + struct.pack(">i", 0) + struct.pack(">i", len(ext)) + ext)


def _field(k: str, v: str) -> bytes:
    kb, vb = k.encode(), v.encode()
    return struct.pack(">H", len(kb)) + kb + struct.pack(">i", len(vb)) + vb


# Headers that start alike, as a producer's do: the same first fields, then some that change.
_shared = st.lists(st.tuples(st.sampled_from(["a", "b", "topic", "é", "k"]), st.sampled_from(["x", "yy", "", "ü", "1"])),
                   min_size=0, max_size=6)


@given(st.lists(_shared, min_size=1, max_size=8), st.lists(st.tuples(texts, texts), max_size=3))
def test_headers_decode_the_same_with_their_leading_fields_reused(tails: list[list[tuple[str, str]]],
                                                                  head: list[tuple[str, str]]) -> None:
    """The decoder reuses the leading fields of headers that start alike (docs/benchmarks.md, "Hot
    paths"): every header still decodes to exactly its own fields, a key sent twice included."""
    from tidalmq.remoting import command

    command._EXT_PREFIXES.clear()
    command._EXT_SEEN.clear()
    base = [("group", "PG"), ("topic", "T"), *head]
    for _ in range(2):  # the second round meets the prefixes learned in the first
        for tail in tails:
            fields = base + tail
            cmd = decode_frame_body(_rmq_header(b"".join(_field(k, v) for k, v in fields)))
            assert cmd.ext_fields == dict(fields)


def test_a_known_prefix_followed_by_garbage_is_still_a_frame_error() -> None:
    from tidalmq.remoting import command

    command._EXT_PREFIXES.clear()
    command._EXT_SEEN.clear()
    good = _field("a", "PG") + _field("b", "T") + _field("c", "1")
    for _ in range(3):
        assert decode_frame_body(_rmq_header(good)).ext_fields == {"a": "PG", "b": "T", "c": "1"}
    assert command._EXT_PREFIXES  # learned
    with pytest.raises(FrameError, match="extField value length out of range"):
        decode_frame_body(_rmq_header(good + b"\x00\x01d\x00\x00\x00\x09v"))
    with pytest.raises(FrameError, match="extFields length out of range"):
        decode_frame_body(_rmq_frame(_FIXED + struct.pack(">ii", 0, len(good) + 4) + good))


def test_prefix_cache_is_bounded_and_skips_headers_that_never_repeat() -> None:
    from tidalmq.remoting import command

    command._EXT_PREFIXES.clear()
    command._EXT_SEEN.clear()
    for i in range(command._EXT_PREFIXES_MAX * 2 + 10):  # first fields that change every time
        ext = _field("bornTimestamp", str(i)) + _field("b", "T") + _field("c", "v" * 2000)
        assert decode_frame_body(_rmq_header(ext)).ext_fields == {"bornTimestamp": str(i), "b": "T", "c": "v" * 2000}
    assert not command._EXT_PREFIXES  # never seen twice: nothing learned
    assert len(command._EXT_SEEN) <= command._EXT_PREFIXES_MAX
    for i in range(command._EXT_PREFIXES_MAX + 10):  # each seen twice, each learned
        ext = _field("a", f"PG{i}") + _field("b", "T") + _field("c", "v" * 2000)
        for _ in range(2):
            decode_frame_body(_rmq_header(ext))
    assert 0 < len(command._EXT_PREFIXES) <= command._EXT_PREFIXES_MAX
    assert all(len(p) <= command._EXT_PREFIX_MAX_LEN for p, _ in command._EXT_PREFIXES.values())

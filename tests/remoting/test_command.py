"""The remoting codec, without sockets."""

from __future__ import annotations

import json
import struct
from collections.abc import Iterator
from contextlib import contextmanager

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
    frames_in,
)

texts = st.text(st.characters(blacklist_categories=["Cs"]), max_size=40)
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
    out: list[RemotingCommand] = []
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
    with pytest.raises(TypeError, match="missing 1 required positional argument"):
        tmpl.encode("x")
    with pytest.raises(TypeError, match="2 positional arguments but 3 were given"):
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


# Headers of a few layouts, as a client's requests of a few kinds: the same keys, values of the same or other
# lengths (and ASCII or not), so the decoder meets its learned shapes, headers that almost fit them, and
# headers it cannot learn (a key sent twice, a key that is no identifier, non-ASCII text).
_keys = st.sampled_from(["a", "b", "topic", "é", "k", "AccessKey", "x-y", "if"])
_values = st.sampled_from(["x", "yy", "", "ü", "1", "12", "\x01\x02", "\n", "%s"])
_layout = st.lists(st.tuples(_keys, _values), min_size=0, max_size=6)


@contextmanager
def _fresh_shapes(scans_per_learn: int = 1) -> Iterator[None]:
    """The decoder's learned layouts emptied, and a layout learnable after every ``scans_per_learn``
    headers scanned (the module's budget restored after)."""
    from tidalmq.remoting import command

    before = command._EXT_SCANS_PER_LEARN
    command._EXT_SHAPES.clear()
    command._EXT_LAST_LENS.clear()
    command._EXT_SCANS_PER_LEARN = command._ext_scans = scans_per_learn
    try:
        yield
    finally:
        command._EXT_SCANS_PER_LEARN = before


@given(st.lists(_layout, min_size=1, max_size=6), st.lists(st.integers(0, 5), min_size=1, max_size=30))
def test_headers_decode_the_same_whichever_shapes_were_learned(layouts: list[list[tuple[str, str]]],
                                                             order: list[int]) -> None:
    """The decoder learns the layouts of headers that repeat (command._EXT_SHAPES; docs/benchmarks.md,
    "Hot paths"): every header still decodes to exactly its own fields, a key sent twice included (the
    last one wins, as in a Java HashMap filled in order)."""
    with _fresh_shapes():
        for i in order * 2:  # the second pass meets what the first learned
            fields = layouts[i % len(layouts)]
            cmd = decode_frame_body(_rmq_header(b"".join(_field(k, v) for k, v in fields)))
            assert cmd.ext_fields == dict(fields)


def test_a_repeated_layout_is_learned_and_then_decodes_other_values_of_its_lengths() -> None:
    from tidalmq.remoting import command

    with _fresh_shapes(scans_per_learn=64):  # the first layout is learned at once

        def header(group: str, ts: str, props: str) -> bytes:
            return _rmq_header(_field("a", group) + _field("g", ts) + _field("i", props))

        for ts in ("1700000000001", "1700000000002"):
            decode_frame_body(header("PG", ts, "UNIQ_KEY\x01AB\x02"))
        assert command._EXT_SHAPES  # seen twice with the same value lengths: learned
        cmd = decode_frame_body(header("QG", "1799999999999", "TAGS\x01\n\x02\x02"))  # other bytes, same lengths
        assert cmd.ext_fields == {"a": "QG", "g": "1799999999999", "i": "TAGS\x01\n\x02\x02"}
        cmd = decode_frame_body(header("PG", "1700000000003", "UNIQ_KEY\x01\u00e9\x02"))  # not ASCII: scanned
        assert cmd.ext_fields["i"] == "UNIQ_KEY\x01\u00e9\x02"


def test_a_learned_layout_followed_by_garbage_is_still_a_frame_error() -> None:
    from tidalmq.remoting import command

    with _fresh_shapes():
        good = _field("a", "PG") + _field("b", "T") + _field("c", "1")
        for _ in range(3):
            assert decode_frame_body(_rmq_header(good)).ext_fields == {"a": "PG", "b": "T", "c": "1"}
        assert command._EXT_SHAPES  # learned
        with pytest.raises(FrameError, match="extField value length out of range"):
            decode_frame_body(_rmq_header(good + b"\x00\x01d\x00\x00\x00\x09v"))
        with pytest.raises(FrameError, match="extFields length out of range"):
            decode_frame_body(_rmq_frame(_FIXED + struct.pack(">ii", 0, len(good) + 4) + good))


def test_learned_shapes_are_bounded_and_headers_that_never_repeat_teach_nothing() -> None:
    from tidalmq.remoting import command

    with _fresh_shapes():
        for i in range(command._EXT_SHAPES_MAX * 2 + 10):  # every header of its own length: nothing repeats
            ext = _field("b", "T") + _field("c", "v" * i)
            assert decode_frame_body(_rmq_header(ext)).ext_fields == {"b": "T", "c": "v" * i}
        assert not command._EXT_SHAPES
        assert len(command._EXT_LAST_LENS) <= command._EXT_SHAPES_MAX
        for i in range(command._EXT_SHAPES_PER_LEN + 3):  # layouts of one length, each seen twice: each learned
            ext = _field("a", "x" * i) + _field("b", "y" * (20 - i))
            for _ in range(2):
                decode_frame_body(_rmq_header(ext))
        (shapes,) = command._EXT_SHAPES.values()
        assert len(shapes) == command._EXT_SHAPES_PER_LEN
        for i in range(command._EXT_SHAPES_MAX + 10):  # many lengths, each learned
            ext = _field("a", "x" * i)
            for _ in range(2):
                decode_frame_body(_rmq_header(ext))
        assert 0 < len(command._EXT_SHAPES) <= command._EXT_SHAPES_MAX


def test_a_header_of_too_many_fields_is_decoded_but_never_learned() -> None:
    """A layout's compile grows with its fields (150 ms for 10,000): a client repeating a header of more than
    _EXT_SHAPE_FIELDS_MAX fields is decoded field by field every time, never compiled on the event loop."""
    from tidalmq.remoting import command

    with _fresh_shapes():
        for n in (command._EXT_SHAPE_FIELDS_MAX, command._EXT_SHAPE_FIELDS_MAX + 1):
            fields = {f"k{i}": "v" for i in range(n)}
            ext = b"".join(_field(k, v) for k, v in fields.items())
            for _ in range(3):
                assert decode_frame_body(_rmq_header(ext)).ext_fields == fields
            assert (len(ext) in command._EXT_SHAPES) == (n <= command._EXT_SHAPE_FIELDS_MAX)


def test_a_client_changing_its_layout_on_purpose_gets_one_shape_compiled_per_budget(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Layouts that each come twice in a row and never again (an adversary's, or a careless client's) are
    compiled at most once per _EXT_SCANS_PER_LEARN headers scanned, and still decode right."""
    from tidalmq.remoting import command

    compiled = 0
    compile_ = command.re.compile

    def counting(*args: object, **kw: object) -> object:
        nonlocal compiled
        compiled += 1
        return compile_(*args, **kw)  # type: ignore[call-overload]

    monkeypatch.setattr(command.re, "compile", counting)
    scans = 0
    with _fresh_shapes(scans_per_learn=64):
        for j in range(41):
            for m in range(21):  # 861 layouts of one length
                fields = {"a": "x" * j, "b": "y" * (40 - j), "c": "z" * m, "d": "w" * (20 - m)}
                ext = b"".join(_field(k, v) for k, v in fields.items())
                for _ in range(2):
                    assert decode_frame_body(_rmq_header(ext)).ext_fields == fields
                    scans += 1
    assert 1 <= compiled <= 1 + scans // 64


def test_decoded_frames_stay_addressable_until_the_next_read() -> None:
    """FrameDecoder.decoded_to marks where the frames yielded end; frames_view shows their bytes, as they
    came, until the next feed (what the ACL's signature worker is handed), and frames_in decodes them."""
    frames = [encode_frame(RemotingCommand(code=i, opaque=i, body=bytes(i * 10))) for i in range(1, 6)]
    dec = FrameDecoder()
    dec.feed(frames[0] + frames[1][:7])
    assert [c.opaque for c in dec.commands()] == [1]
    dec.feed(frames[1][7:] + b"".join(frames[2:]) + frames[0][:3])  # the first frame's bytes dropped here
    marks = [dec.decoded_to]
    got = []
    for cmd in dec.commands():
        got.append(cmd.opaque)
        marks.append(dec.decoded_to)
    assert got == [2, 3, 4, 5] and dec.buffered == 3
    for i, (a, b) in enumerate(zip(marks, marks[1:], strict=False)):
        with dec.frames_view(a, b) as view:
            assert bytes(view) == frames[i + 1]
    with dec.frames_view(marks[0], marks[-1]) as view:
        assert [c.opaque for c in frames_in(view, 0, len(view))] == [2, 3, 4, 5]
    with pytest.raises(FrameError, match="runs past"):
        list(frames_in(frames[1][:-1], 0, len(frames[1]) - 1))
    dec.feed(frames[0][3:])
    assert [c.opaque for c in dec.commands()] == [1] and dec.buffered == 0

"""Each request is declared once (remoting/protocol/): outside the declaration no module of src/ spells a
header field's name where a header is read or written, and the declaration derives what the processors,
the clients and the validation use."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

from tidalmq.remoting.codes import RequestCode as RC
from tidalmq.remoting.protocol import broker_headers as bh
from tidalmq.remoting.protocol import namesrv_headers as nh
from tidalmq.remoting.protocol.header import Header, RequestError
from tidalmq.remoting.protocol.requests import REQUESTS, ext_of, form_of, forms

SRC = Path(__file__).resolve().parents[2] / "src" / "tidalmq"
DECLARATION = SRC / "remoting" / "protocol"
# Calls whose argument at this position (or keyword) is a request's or response's extFields.
_EXT_ARGS: dict[str, tuple[int, str]] = {
    "RemotingCommand": (-1, "ext_fields"), "make_response": (2, "ext_fields"), "invoke_ok": (2, "ext"),
    "invoke_namesrv": (1, "ext"), "_call": (2, "ext"), "_namesrv": (1, "ext"), "encode_ext_fields": (0, "fields"),
    "ExtFieldsTemplate": (0, "keys"),
}


def declared_names() -> set[str]:
    names: set[str] = set()
    for module in (bh, nh):
        for value in vars(module).values():
            if isinstance(value, type) and issubclass(value, Header):
                header: type[Header] = value
                names.update(f.name for form in header.FORMS for f in form)
    return names


def _callee(node: ast.Call) -> str:
    f = node.func
    return f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""


def _ext_args(node: ast.Call) -> Iterator[ast.expr]:
    where = _EXT_ARGS.get(_callee(node))
    if where is None:
        return
    pos, kw = where
    if 0 <= pos < len(node.args):
        yield node.args[pos]
    for k in node.keywords:
        if k.arg == kw:
            yield k.value
    if _callee(node) == "ExtFieldsTemplate" and len(node.args) > 1:
        yield node.args[1]


def _is_ext(node: ast.expr, names: set[str]) -> bool:
    """``x.ext_fields``, or a local bound to a header's extFields."""
    return (isinstance(node, ast.Attribute) and node.attr == "ext_fields") or (
        isinstance(node, ast.Name) and node.id in names)


def _literals(node: ast.expr) -> Iterator[ast.Constant]:
    """String constants a dict literal's keys, or a tuple of keys, spell."""
    items = node.keys if isinstance(node, ast.Dict) else node.elts if isinstance(node, ast.Tuple | ast.List) else []
    for k in items:
        if isinstance(k, ast.Constant) and isinstance(k.value, str):
            yield k


def header_spellings(tree: ast.AST) -> Iterator[ast.Constant]:
    """The string constants a module uses as header keys: looked up in extFields (``req.ext_fields["topic"]``,
    ``h.get("topic")`` after ``h = req.ext_fields``, ``"topic" in h``), or keys of the extFields it builds
    (``RemotingCommand(ext_fields={...})``, ``make_response(code, remark, {...})``, ``invoke_ok(addr, code,
    {...})``, a dict bound to a name that is passed so)."""
    for scope in ast.walk(tree):
        if not isinstance(scope, ast.FunctionDef | ast.AsyncFunctionDef | ast.Module):
            continue
        body = list(ast.walk(scope))
        names: set[str] = set()
        for node in body:
            if isinstance(node, ast.Assign) and _is_ext(node.value, set()):
                names.update(t.id for t in node.targets if isinstance(t, ast.Name))
            if isinstance(node, ast.Call):
                names.update(a.id for a in _ext_args(node) if isinstance(a, ast.Name))
        for node in body:
            if isinstance(node, ast.Call):
                for arg in _ext_args(node):
                    yield from _literals(arg)
                f = node.func
                if (isinstance(f, ast.Attribute) and f.attr in ("get", "pop", "setdefault") and node.args
                        and _is_ext(f.value, names) and isinstance(node.args[0], ast.Constant)):
                    yield node.args[0]
            elif isinstance(node, ast.Subscript) and _is_ext(node.value, names):
                if isinstance(node.slice, ast.Constant):
                    yield node.slice
            elif isinstance(node, ast.Compare) and any(_is_ext(c, names) for c in node.comparators):
                if isinstance(node.left, ast.Constant):
                    yield node.left
            elif isinstance(node, ast.Assign | ast.AnnAssign):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                if node.value is not None and any(isinstance(t, ast.Name) and t.id in names for t in targets):
                    yield from _literals(node.value)


def spelled_outside(root: Path) -> list[str]:
    names = declared_names()
    found = []
    for path in sorted(root.rglob("*.py")):
        if DECLARATION in path.parents:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        seen = {(c.lineno, c.col_offset): c for c in header_spellings(tree)}  # a function and its module
        for _, c in sorted(seen.items()):
            if c.value in names:
                found.append(f"{path.relative_to(root)}:{c.lineno}: {c.value!r}")
    return found


def test_no_header_field_is_spelled_outside_the_declaration() -> None:
    assert spelled_outside(SRC) == []


def test_the_scan_finds_what_it_looks_for(tmp_path: Path) -> None:
    """The scan is not blind: each way of spelling a header field by hand is found."""
    (tmp_path / "m.py").write_text(
        "def f(req, inst, addr):\n"
        "    h = req.ext_fields\n"
        "    a = h['consumerGroup']\n"
        "    b = req.ext_fields.get('queueOffset')\n"
        "    c = 'topic' in h\n"
        "    ext = {'brokerName': 'b'}\n"
        "    inst.invoke_ok(addr, 1, ext)\n"
        "    return req.make_response(0, None, {'nextBeginOffset': '1'})\n", encoding="utf-8")
    found = spelled_outside(tmp_path)
    assert [f.rsplit(": ", 1)[1] for f in found] == ["'consumerGroup'", "'queueOffset'", "'topic'",
                                                      "'brokerName'", "'nextBeginOffset'"]


def test_a_header_parses_what_it_writes_in_each_spelling() -> None:
    h = bh.SendMessageRequestHeader(producer_group="PG", topic="T", queue_id=3, born_timestamp=12, batch=True,
                                    max_reconsume_times=None, broker_name="b")
    for form in (0, bh.SEND_V2):
        ext = h.to_ext(form)
        assert bh.SendMessageRequestHeader.parse(ext, form) == h
    assert h.to_ext(bh.SEND_V2)["m"] == "true" and "l" not in h.to_ext(bh.SEND_V2)
    assert ext_of(RC.SEND_MESSAGE_V2, h) == h.to_ext(bh.SEND_V2) and ext_of(RC.SEND_MESSAGE, h) == h.to_ext()
    with pytest.raises(TypeError, match="carries a PullMessageRequestHeader"):  # a client's request of the wrong header
        ext_of(RC.PULL_MESSAGE, h)


def test_parse_refuses_as_the_validation_did() -> None:
    good = bh.PullMessageRequestHeader(consumer_group="G", topic="T", queue_id=0, queue_offset=5).to_ext()
    assert bh.PullMessageRequestHeader.parse(good).max_msg_nums == 32  # the declared default
    for field, value, why in (("queueId", "2147483648", "out of range for a int"), ("topic", "a b", "topic"),
                              ("queueOffset", "x", "is not a long")):
        with pytest.raises(RequestError, match=why):
            bh.PullMessageRequestHeader.parse({**good, field: value})
    missing = dict(good)
    del missing["queueOffset"]
    with pytest.raises(RequestError, match="the custom field <queueOffset> is null"):
        bh.PullMessageRequestHeader.parse(missing)
    # an optional field sent empty counts as absent (the C++ client writes empty strings)
    assert bh.PullMessageRequestHeader.parse({**good, "maxMsgNums": ""}).max_msg_nums == 32
    # the C++ client's bool
    assert nh.RegisterBrokerRequestHeader.parse({"brokerName": "b", "brokerAddr": "127.0.0.1:1",
                                                 "clusterName": "C", "compressed": "1"}).compressed is True


def test_the_spelling_of_each_send_code() -> None:
    v2 = bh.SendMessageRequestHeader(topic="T").to_ext(bh.SEND_V2)
    full = bh.SendMessageRequestHeader(topic="T").to_ext()
    assert form_of(RC.SEND_MESSAGE, full) == 0 and form_of(RC.SEND_MESSAGE_V2, v2) == bh.SEND_V2
    assert form_of(RC.SEND_BATCH_MESSAGE, full) == 0 and form_of(RC.SEND_BATCH_MESSAGE, v2) == bh.SEND_V2
    assert forms(RC.SEND_BATCH_MESSAGE) == (0, bh.SEND_V2)
    assert all(forms(code) == (0,) for code in REQUESTS if code not in (RC.SEND_MESSAGE_V2, RC.SEND_BATCH_MESSAGE))

"""TidalMQ's own apache.rocketmq.v2 definitions: the committed generated modules are what
scripts/gen_grpc_protocol.py makes from the .proto files, and they describe the protocol the official
5.x client speaks, field for field (a name or number that differs breaks the wire)."""

from __future__ import annotations

import importlib.metadata as md
import importlib.util
import tomllib
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import descriptor_pb2
from rocketmq.grpc_protocol import definition_pb2 as client_definition
from rocketmq.grpc_protocol import service_pb2 as client_service

from tidalmq.proxy.protocol import definition_pb2, service_pb2

ROOT = Path(__file__).resolve().parents[2]


def _load_script() -> Any:
    spec = importlib.util.spec_from_file_location("gen_grpc_protocol", ROOT / "scripts" / "gen_grpc_protocol.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _pinned(name: str) -> str:
    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["test"]
    return next(r.split("==")[1] for r in extra if r.split("==")[0] == name)


def test_the_committed_generated_modules_are_what_the_script_makes() -> None:
    # protoc writes its own version into the modules: another grpcio-tools makes other text
    assert md.version("grpcio-tools") == _pinned("grpcio-tools"), "install the test extra's grpcio-tools"
    script = _load_script()
    made = script.generated()
    assert sorted(made) == ["definition_pb2.py", "service_pb2.py", "service_pb2_grpc.py"]
    package = ROOT / "src" / "tidalmq" / "proxy" / "protocol"
    for name, text in made.items():
        assert (package / name).read_text() == text, f"{name} is out of date: run scripts/gen_grpc_protocol.py"


def _shape(file: Any) -> dict[str, Any]:
    """What a file says on the wire: every enum's values, every message's fields (name, number, type,
    label, type name, oneof, explicit presence), every service's methods, by full name."""
    proto = descriptor_pb2.FileDescriptorProto()
    file.CopyToProto(proto)
    out: dict[str, Any] = {}

    def enum(prefix: str, e: Any) -> None:
        out[f"{prefix}.{e.name}"] = sorted((v.name, v.number) for v in e.value)

    def message(prefix: str, m: Any) -> None:
        name = f"{prefix}.{m.name}"
        oneofs = [o.name for o in m.oneof_decl]
        out[name] = sorted((f.name, f.number, f.type, f.label, f.type_name,
                            oneofs[f.oneof_index] if f.HasField("oneof_index") else None, f.proto3_optional)
                           for f in m.field)
        if m.options.map_entry:
            out[name].append(("map_entry",))
        for e in m.enum_type:
            enum(name, e)
        for n in m.nested_type:
            message(name, n)

    for e in proto.enum_type:
        enum(proto.package, e)
    for m in proto.message_type:
        message(proto.package, m)
    for s in proto.service:
        out[f"{proto.package}.{s.name}"] = [(r.name, r.input_type, r.output_type, r.client_streaming,
                                             r.server_streaming) for r in s.method]
    return out


@pytest.mark.parametrize(("ours", "theirs"), [(definition_pb2, client_definition), (service_pb2, client_service)],
                         ids=["definition", "service"])
def test_the_definitions_match_the_official_clients_field_for_field(ours: Any, theirs: Any) -> None:
    assert ours.DESCRIPTOR.package == "apache.rocketmq.v2"
    mine, official = _shape(ours.DESCRIPTOR), _shape(theirs.DESCRIPTOR)
    assert sorted(mine) == sorted(official)
    for name in official:
        assert mine[name] == official[name], name


def test_a_message_ours_encodes_is_the_official_clients_to_decode() -> None:
    ours = service_pb2.SendMessageRequest()
    m = ours.messages.add(body=b"x")
    m.topic.name = "T"
    m.user_properties["k"] = "v"
    m.system_properties.tag = "A"
    m.system_properties.delivery_timestamp.FromMilliseconds(1_700_000_000_123)
    theirs = client_service.SendMessageRequest.FromString(ours.SerializeToString())
    got = theirs.messages[0]
    assert (got.topic.name, dict(got.user_properties), got.system_properties.tag, got.body) == ("T", {"k": "v"}, "A", b"x")
    assert got.system_properties.delivery_timestamp.ToMilliseconds() == 1_700_000_000_123
    assert service_pb2.SendMessageRequest.FromString(theirs.SerializeToString()) == ours

"""The gRPC endpoint imports the protocol's generated messages without the 5.x client behind them (a
broker's start does not pay for it), and a process that runs both still gets the whole client."""

from __future__ import annotations

import subprocess
import sys

CHECK = """
import sys
import tidalmq.proxy.server
assert "rocketmq.v5" not in sys.modules, "the endpoint loaded the 5.x client"
from tidalmq.proxy.convert import pb
assert pb.Resource(name="T").name == "T"
import rocketmq
from rocketmq import ClientConfiguration, Producer
import rocketmq.grpc_protocol
assert Producer.__module__.startswith("rocketmq.v5.") and rocketmq.SimpleConsumer is not None
assert rocketmq.grpc_protocol.definition_pb2.Resource is pb.Resource
print("ok")
"""


def test_the_endpoint_imports_the_protocol_without_the_client_and_the_client_still_works() -> None:
    out = subprocess.run([sys.executable, "-c", CHECK], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"

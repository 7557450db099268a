"""The gRPC endpoint's protocol is TidalMQ's own: starting it imports no `rocketmq` package, and a
process that runs the official 5.x client beside it gets both protocols, each in its own pool."""

from __future__ import annotations

import subprocess
import sys

CHECK = """
import sys
import tidalmq.proxy.server
from tidalmq.proxy.protocol import definition_pb2 as ours
assert not [m for m in sys.modules if m == "rocketmq" or m.startswith("rocketmq.")], "the endpoint imported rocketmq"
from rocketmq import ClientConfiguration, Producer
from rocketmq.grpc_protocol import definition_pb2 as theirs
assert Producer.__module__.startswith("rocketmq.v5.")
assert ours.Resource is not theirs.Resource
assert theirs.Resource.FromString(ours.Resource(name="T").SerializeToString()).name == "T"
assert ours.Resource.FromString(theirs.Resource(name="U").SerializeToString()).name == "U"
print("ok")
"""


def test_the_endpoint_imports_no_rocketmq_and_runs_beside_the_official_client() -> None:
    out = subprocess.run([sys.executable, "-c", CHECK], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"

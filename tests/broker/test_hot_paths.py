"""The broker's fast paths answer exactly what the general ones do (docs/benchmarks.md, "Hot paths")."""

from __future__ import annotations

from tests.broker.rawclient import pull_cmd, records, run, send_cmd
from tests.support import Standalone
from tidalmq.common.msgid import decode_offset_msg_id
from tidalmq.remoting.codes import ResponseCode
from tidalmq.remoting.command import RemotingCommand, SerializeType
from tidalmq.remoting.transport import RemotingClient


def test_send_response_header_is_the_same_in_both_serializations(shared_standalone: Standalone) -> None:
    """A stored send is answered from a pre-encoded header in the ROCKETMQ serialization and from a dict
    in JSON: the client reads the same fields, and msgId names the stored record."""
    addr = shared_standalone.broker_addr
    topic = "HotSendResponse"

    async def scenario() -> None:
        c = RemotingClient()
        try:
            answers: list[RemotingCommand] = []
            for i, st in enumerate((SerializeType.JSON, SerializeType.ROCKETMQ, SerializeType.JSON,
                                    SerializeType.ROCKETMQ)):
                cmd = send_cmd(topic, f"m{i}".encode(), queue_id=1)
                cmd.serialize_type = st
                r = await c.invoke(addr, cmd, 5)
                assert r.code == ResponseCode.SUCCESS, r.remark
                assert r.serialize_type == st
                answers.append(r)
            for i, r in enumerate(answers):
                assert set(r.ext_fields) == {"msgId", "queueId", "queueOffset", "MSG_REGION", "TRACE_ON"}
                assert r.ext_fields["queueId"] == "1"
                assert r.ext_fields["queueOffset"] == str(i)
                assert (r.ext_fields["MSG_REGION"], r.ext_fields["TRACE_ON"]) == ("DefaultRegion", "true")
            pulled = records((await c.invoke(addr, pull_cmd(topic, 1, 0), 5)).body_bytes())
            assert [m.body for m in pulled] == [b"m0", b"m1", b"m2", b"m3"]
            for r, m in zip(answers, pulled, strict=True):
                assert decode_offset_msg_id(r.ext_fields["msgId"])[2] == m.commit_log_offset
        finally:
            await c.close()

    run(scenario())

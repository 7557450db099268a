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


def test_joint_answer_of_a_timer_batch_stored_as_two_puts() -> None:
    """The one answer to a batch stored as two puts (its messages due already, the rest parked): the ids
    in the batch's order once both puts are answered, whichever comes first; a failed put's answer as it
    is, never a success for a batch half stored."""
    from tidalmq.broker.processors.send import _SEND_OK_HEADER, _JointAnswer

    req = send_cmd("T", b"x")
    req.serialize_type = SerializeType.ROCKETMQ

    def ok(ids: str, offset: str) -> RemotingCommand:
        r = req.make_response(ResponseCode.SUCCESS)
        r.ext_encoded = _SEND_OK_HEADER.encode(ids, "0", offset)  # as a client's send is answered on the wire
        return r

    for parked_first in (True, False):
        got: list[RemotingCommand] = []
        joint = _JointAnswer(req, got.append, [1, 3], 5)
        answers = [(joint.parked, ok("P0,P2,P4", "7")), (joint.due, ok("D1,D3", "40"))]
        for part, resp in (answers if parked_first else answers[::-1]):
            assert not got
            part(resp)
        [merged] = got
        assert merged.code == ResponseCode.SUCCESS and merged.opaque == req.opaque
        assert merged.ext_fields["msgId"] == "P0,D1,P2,D3,P4"
        assert (merged.ext_fields["queueId"], merged.ext_fields["queueOffset"]) == ("0", "7")  # the parked put's
    for failed_part in ("due", "parked"):
        got = []
        joint = _JointAnswer(req, got.append, [0], 2)
        refused = req.make_response(ResponseCode.SYSTEM_ERROR, "create mapped file failed")
        getattr(joint, failed_part)(refused)
        getattr(joint, "parked" if failed_part == "due" else "due")(ok("X", "1"))
        assert got == [refused]

"""suggestWhichBrokerId in PULL_MESSAGE answers: RocketMQ's slaveReadEnable rule."""

from __future__ import annotations

from pathlib import Path

from tests.broker.rawclient import pull_cmd, run, send_cmd, wait_max_offset
from tests.support import Standalone
from tidalmq.common import fastjson
from tidalmq.remoting.codes import RequestCode, ResponseCode
from tidalmq.remoting.command import RemotingCommand
from tidalmq.remoting.transport import RemotingClient


async def _suggestions(addr: str) -> tuple[str, str, str]:
    """(far-behind pull, far-behind pull of a group sending slow readers to broker 2, caught-up pull)."""
    client = RemotingClient()
    try:
        for i in range(3):
            assert (await client.invoke(addr, send_cmd("SuggestT", b"m%d" % i), 5)).code == ResponseCode.SUCCESS
        await wait_max_offset(client, addr, "SuggestT", 0, 3)
        group = {"groupName": "SlowToTwo", "whichBrokerWhenConsumeSlowly": 2}
        resp = await client.invoke(addr, RemotingCommand(code=RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
                                                         body=fastjson.dumpb(group)), 5)
        assert resp.code == ResponseCode.SUCCESS
        behind = await client.invoke(addr, pull_cmd("SuggestT", 0, 1, max_nums=1), 5)
        slow = await client.invoke(addr, pull_cmd("SuggestT", 0, 1, max_nums=1, group="SlowToTwo"), 5)
        at_end = await client.invoke(addr, pull_cmd("SuggestT", 0, 3), 5)
        assert behind.code == slow.code == ResponseCode.SUCCESS
        return (behind.ext_fields["suggestWhichBrokerId"], slow.ext_fields["suggestWhichBrokerId"],
                at_end.ext_fields["suggestWhichBrokerId"])
    finally:
        await client.close()


def test_master_sends_far_behind_pulls_to_the_slave_only_with_slave_read_enable(tmp_path: Path) -> None:
    # accessMessageInMemoryMaxRatio=0: any pull that is not at the CommitLog's end counts as far behind.
    common = {"accessMessageInMemoryMaxRatio": "0", "timerWheelEnable": "false"}
    with Standalone(tmp_path / "on", {**common, "slaveReadEnable": "true"}) as on:
        assert run(_suggestions(on.broker_addr)) == ("1", "2", "0")
    with Standalone(tmp_path / "off", common) as off:
        assert run(_suggestions(off.broker_addr)) == ("0", "0", "0")

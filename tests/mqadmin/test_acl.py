"""``mqadmin`` against an ACL-on broker signs as RocketMQ's tools do: with the account of
``$ROCKETMQ_HOME/conf/tools.yml``."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.acl.conftest import acl_standalone  # noqa: F401 (the ACL-on broker fixture)
from tests.compat.harness import uniq
from tests.mqadmin.conftest import run_mqadmin
from tests.support import Standalone


def test_signs_with_tools_yml_and_is_refused_without(acl_standalone: Standalone, tmp_path: Path,  # noqa: F811
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("TIDALMQ_ACCESS_KEY", "TIDALMQ_SECRET_KEY"):
        monkeypatch.delenv(var, raising=False)
    s, topic = acl_standalone, uniq("MqaAcl")
    home, bare = tmp_path / "home", tmp_path / "bare"
    (home / "conf").mkdir(parents=True)
    bare.mkdir()
    (home / "conf" / "tools.yml").write_text("accessKey: adminUser\nsecretKey: adminSecret1\n")
    args = ("updateTopic", "-c", "DefaultCluster", "-t", topic)
    anonymous = run_mqadmin(s.namesrv_addr, *args, env={"ROCKETMQ_HOME": str(bare)})
    assert anonymous.returncode == 1 and anonymous.stderr.startswith("mqadmin: CODE: ")
    signed = run_mqadmin(s.namesrv_addr, *args, env={"ROCKETMQ_HOME": str(home)})
    assert signed.returncode == 0, signed.stderr
    listed = run_mqadmin(s.namesrv_addr, "topicStatus", "-t", topic, env={"ROCKETMQ_HOME": str(home)})
    table = listed.stdout.split("\n\n", 1)[0].splitlines()  # then RocketMQ 5's "Topic Put TPS" line
    assert listed.returncode == 0 and len(table) == 9  # header and 8 queues

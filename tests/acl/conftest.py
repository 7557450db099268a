"""A standalone with ``aclEnable=true`` and its plain_acl.yml where RocketMQ looks (``<home>/conf/``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support import ModuleTmp, Standalone
from tidalmq.acl import SessionCredentials

ADMIN = SessionCredentials("adminUser", "adminSecret1")
USER = SessionCredentials("appUser1", "appSecret1")

PLAIN_ACL = """
globalWhiteRemoteAddresses:
{white}
accounts:
  - accessKey: adminUser
    secretKey: adminSecret1
    admin: true
  - accessKey: appUser1
    secretKey: appSecret1
    whiteRemoteAddress:
    admin: false
    defaultTopicPerm: DENY
    defaultGroupPerm: SUB
    topicPerms:
      - pubOnly=PUB
      - subOnly=SUB
      - both=PUB|SUB
      - bulk=PUB|SUB
      - denied=DENY
    groupPerms:
      - deniedGroup=DENY
"""


def acl_text(white: list[str] | None = None) -> str:
    return PLAIN_ACL.format(white="\n".join(f"  - {w}" for w in white or []) or "  []")


@pytest.fixture(scope="module")
def acl_standalone(module_tmp: ModuleTmp) -> Iterator[Standalone]:
    """One ACL-on broker for a module's tests; a test that rewrites the file puts it back."""
    data = module_tmp("acl") / "data"
    (data / "conf").mkdir(parents=True)
    (data / "conf" / "plain_acl.yml").write_text(acl_text())
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("ROCKETMQ_HOME", raising=False)  # the data directory is the home, then
        s = Standalone(data, {"aclEnable": "true", "mappedFileSizeCommitLog": str(64 * 1024 * 1024)})
        s.start()
    try:
        yield s
    finally:
        s.stop()

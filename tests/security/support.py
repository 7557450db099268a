"""What the security tests share: a canary directory beside the data dir and its snapshot."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from tidalmq.common import fastjson
from tidalmq.remoting.codes import RequestCode as RC
from tidalmq.remoting.command import RemotingCommand


def plant_canary(root: Path) -> Path:
    """A small tree beside the data dir for traversal strings to aim at."""
    canary = root / "canary"
    (canary / "x" / "planted").mkdir(parents=True, exist_ok=True)
    (canary / "keep.txt").write_text("must survive")
    (canary / "x" / "keep2.txt").write_text("must survive too")
    return canary


def snapshot(root: Path, skip: tuple[Path, ...] = ()) -> dict[str, str]:
    """Every file and directory under ``root`` (but ``skip``) with a digest of its content."""
    out: dict[str, str] = {}
    skipped = {str(p) for p in skip}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if os.path.join(dirpath, d) not in skipped]
        out[os.path.relpath(dirpath, root) + "/"] = "dir"
        for f in filenames:
            p = os.path.join(dirpath, f)
            if p in skipped:
                continue
            with open(p, "rb") as fh:
                out[os.path.relpath(p, root)] = hashlib.sha1(fh.read()).hexdigest()
    return out


def up_to_root(path: Path) -> str:
    """``../`` enough times to climb from anywhere to ``/`` and down to ``path`` (the measured shape)."""
    return "../" * 12 + str(path).lstrip("/")


def heartbeat(client_id: str, group: object, topic: object = "T") -> RemotingCommand:
    body = {"clientID": client_id, "consumerDataSet": [{
        "groupName": group, "consumeType": "CONSUME_PASSIVELY", "messageModel": "CLUSTERING",
        "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET", "unitMode": False,
        "subscriptionDataSet": [{"topic": topic, "subString": "*", "tagsSet": [], "codeSet": [],
                                 "subVersion": 1, "expressionType": "TAG", "classFilterMode": False}],
    }], "producerDataSet": []}
    return RemotingCommand(code=RC.HEART_BEAT, body=fastjson.dumpb(body))

"""The test side of the compat suite: client agents in subprocesses, and a few broker-side probes."""

from __future__ import annotations

import asyncio
import json
import os
import struct
import subprocess
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tidalmq.acl.signature import SessionCredentials
from tidalmq.client.admin import Admin
from tidalmq.common import fastjson
from tidalmq.remoting.codes import RequestCode, ResponseCode
from tidalmq.remoting.command import RemotingCommand
from tidalmq.remoting.transport import RemotingClient

ROOT = Path(__file__).resolve().parents[2]
# rocketmq==0.4.4 (the official 4.x client) and rocketmq-python-client (5.x, in the test extra for
# tests/grpc) both install a top-level package `rocketmq`, so the 4.x client lives in its own venv, made by
# scripts/setup.sh; the agents run on its interpreter and import only the standard library and tests.compat.
OFFICIAL_PYTHON = Path(os.environ.get("TIDALMQ_RMQ4_PYTHON", str(ROOT / ".venv-rmq4" / "bin" / "python")))


def require_official_client() -> None:
    """Skips the calling test (or module) when the 4.x client's venv is not there."""
    if not OFFICIAL_PYTHON.exists():
        pytest.skip(f"the official client rocketmq==0.4.4 is not installed ({OFFICIAL_PYTHON})",
                    allow_module_level=True)


def uniq(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:10]}"


class AgentError(AssertionError):
    pass


class ClientAgent:
    """One ``tests.compat.agent`` subprocess: an official client producer and/or consumers."""

    def __init__(self, name: str, log_dir: Path, lifetime: float = 240.0,
                 env: dict[str, str] | None = None) -> None:
        """``env``: set in the agent's environment over this process's (``HOME`` moves the C++ core's
        ``~/logs/rocketmq-cpp`` and its NameServer snapshot)."""
        self.name = name
        self.stderr_path = log_dir / f"agent-{name}.stderr"
        err = open(self.stderr_path, "w")
        self.proc = subprocess.Popen(
            [str(OFFICIAL_PYTHON), "-m", "tests.compat.agent", str(lifetime)],
            cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})},
        )
        err.close()
        self.events: list[dict[str, Any]] = []
        self.replies: dict[int, dict[str, Any]] = {}
        self.noise: list[str] = []
        self._cond = threading.Condition()
        self._next_id = 0
        threading.Thread(target=self._read, daemon=True, name=f"agent-{name}").start()
        self.wait(lambda: any(e.get("ev") == "ready" for e in self.events), 20, "agent ready")

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            kind, _, payload = line.partition(" ")
            with self._cond:
                if kind == "R":
                    r = json.loads(payload)
                    self.replies[r["id"]] = r
                elif kind == "E":
                    self.events.append(json.loads(payload))
                else:
                    self.noise.append(line)
                self._cond.notify_all()
        with self._cond:
            self._cond.notify_all()

    def wait(self, predicate: Callable[[], Any], timeout: float, what: str) -> Any:
        """``predicate``'s first true value; AgentError when ``timeout`` passes first or the agent exits."""
        value = self._first_true(predicate, timeout, what)
        if not value:
            raise AgentError(f"agent {self.name}: timed out after {timeout}s waiting for {what}\n{self.stderr_tail()}")
        return value

    def holds_within(self, predicate: Callable[[], Any], timeout: float, what: str) -> bool:
        """Whether ``predicate`` comes true within ``timeout`` (a round of a loop that retries when it does
        not); AgentError when the agent exits first."""
        return bool(self._first_true(predicate, timeout, what))

    def _first_true(self, predicate: Callable[[], Any], timeout: float, what: str) -> Any:
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                value = predicate()
                if value:
                    return value
                left = deadline - time.monotonic()
                if left <= 0:
                    return value
                if self.proc.poll() is not None and not value:
                    # One last look: the reader may still be draining the pipe.
                    self._cond.wait(0.2)
                    value = predicate()
                    if value:
                        return value
                    raise AgentError(f"agent {self.name} exited ({self.proc.returncode}) while waiting for {what}\n"
                                     f"{self.stderr_tail()}")
                self._cond.wait(min(left, 0.5))

    def call(self, op: str, timeout: float = 30.0, **kw: Any) -> Any:
        with self._cond:
            self._next_id += 1
            rid = self._next_id
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"id": rid, "op": op, **kw}) + "\n")
        self.proc.stdin.flush()
        r = self.wait(lambda: self.replies.get(rid), timeout, f"reply to {op}")
        if not r["ok"]:
            raise AgentError(f"agent {self.name}: {op} failed: {r['error']}\n{r.get('trace', '')}")
        return r["result"]

    def messages(self, cid: str | None = None) -> list[dict[str, Any]]:
        with self._cond:
            return [e for e in self.events if e.get("ev") == "msg" and (cid is None or e["cid"] == cid)]

    def sent_events(self) -> list[dict[str, Any]]:
        with self._cond:
            return [e for e in self.events if e.get("ev") == "sent"]

    def wait_messages(self, predicate: Callable[[list[dict[str, Any]]], bool], timeout: float, what: str,
                      cid: str | None = None) -> list[dict[str, Any]]:
        try:
            self.wait(lambda: predicate(self.messages(cid)), timeout, what)
        except AgentError as e:
            got = self.messages(cid)
            keys = sorted({str(m["keys"]) for m in got})
            raise AgentError(f"{e}\nreceived {len(got)} messages, {len(keys)} distinct keys: {keys[:40]}") from None
        return self.messages(cid)

    def settle(self, quiet: float = 1.0, limit: float = 5.0) -> None:
        """Wait until no event has arrived for ``quiet`` seconds. Only for what comes back by the retry path
        (a send-back, its delay level, the retry topic), which no sentinel follows; anything a queue delivers
        in order is waited out with ``sentinels_received``."""
        deadline = time.monotonic() + limit
        last = len(self.events)
        quiet_since = time.monotonic()
        with self._cond:
            while time.monotonic() < deadline:
                self._cond.wait(0.1)
                if len(self.events) != last:
                    last = len(self.events)
                    quiet_since = time.monotonic()
                elif time.monotonic() - quiet_since >= quiet:
                    return

    def stderr_tail(self, n: int = 30) -> str:
        try:
            return "".join(self.stderr_path.read_text(errors="replace").splitlines(keepends=True)[-n:])
        except OSError:
            return ""

    def close(self, timeout: float = 40.0) -> dict[str, Any] | None:
        result = None
        if self.proc.poll() is None:
            try:
                result = self.call("exit", timeout=timeout)
            except (AgentError, OSError, ValueError):
                pass
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)
        return result


# ---- producer / consumer conveniences -------------------------------------------------------------

def msg(topic: str, body: str | dict[str, Any], *, tags: str | None = None, keys: str | None = None,
        props: dict[str, str] | None = None, arg: int | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"topic": topic, "body": {"text": body} if isinstance(body, str) else body}
    if tags is not None:
        spec["tags"] = tags
    if keys is not None:
        spec["keys"] = keys
    if props:
        spec["props"] = props
    if arg is not None:
        spec["arg"] = arg
    return spec


SENTINEL = "sentinel-"


def sentinels_received(producer: ClientAgent, consumers: list[ClientAgent], topic: str, queues: int, *,
                       tags: str | None = None, props: dict[str, str] | None = None, each: bool = False,
                       timeout: float = 30.0) -> set[str]:
    """The wait that shows nothing else is coming (no sleep standing in for it): a sentinel message sent to
    each of ``topic``'s ``queues`` queues after what the test sent, and waited for. A queue delivers in
    order, so once the sentinels are in, whatever was stored before them has come, redeliveries and
    duplicates included. ``each``: every consumer must get every sentinel (broadcasting); else the
    consumers of one group share them. ``tags`` lets them through the consumers' filter; ``props`` (a deliver
    time) sends them the way of what the test waits out. Returns their keys
    (which begin with SENTINEL: ``without_sentinels`` leaves them out of what a test counts)."""
    keys = [f"{SENTINEL}{uuid.uuid4().hex[:8]}-{q}" for q in range(queues)]
    send_acknowledged(producer, [msg(topic, k, tags=tags, keys=k, props=props, arg=q) for q, k in enumerate(keys)],
                      timeout, mode="orderly")
    want = set(keys)
    if each:
        for c in consumers:
            c.wait_messages(lambda ms: want <= {m["keys"] for m in ms}, timeout, "the sentinels")
    else:
        consumers[0].wait(lambda: want <= {m["keys"] for c in consumers for m in c.messages()}, timeout,
                          "the sentinels")
    return want


def without_sentinels(msgs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [m for m in msgs if not (m["keys"] or "").startswith(SENTINEL)]


def send_acknowledged(agent: ClientAgent, messages: list[dict[str, Any]], timeout: float = 30.0,
                      mode: str = "sync") -> list[Any]:
    """Sends each message synchronously (``mode`` sync, or orderly: to the queue its ``arg`` names) until the
    broker acknowledges it (bounded by ``timeout``).

    The C++ core fails a send at once, without trying the broker, while its background thread holds the
    connection table to connect to a broker it just learned from a route (the heartbeat after a route
    update): a producer's first sends to a topic spread over several brokers can fail that way ("No route
    info" after its retries). Tests that are not about that startup race send through this."""
    deadline = time.monotonic() + timeout
    results: list[Any] = [None] * len(messages)
    pending = list(range(len(messages)))
    while pending:
        left = deadline - time.monotonic()
        assert left > 0, f"not acknowledged within {timeout} s: {[results[i] for i in pending][:3]}"
        got = agent.call("send", mode=mode, collect_errors=True, timeout=left,
                         messages=[messages[i] for i in pending])
        for i, r in zip(pending, got, strict=True):
            results[i] = r
        pending = [i for i in pending if not (isinstance(results[i], dict) and results[i].get("status") == "OK")]
        if pending:
            time.sleep(0.05)  # the client's connections come up in its own thread; nothing to wait on from here
    return results


def by_key(msgs: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for m in msgs:
        out.setdefault(m["keys"], []).append(m)
    return out


def body_text(m: dict[str, Any]) -> str:
    import base64

    return base64.b64decode(m["body_b64"]).decode("utf-8")


# ---- broker-side probes (our own remoting client: setup and inspection only) -----------------------

def _run(coro: Any) -> Any:
    return asyncio.run(coro)


def create_topic(namesrv: str, topic: str, queues: int = 4, timeout: float = 15.0,
                 credentials: SessionCredentials | None = None) -> None:
    """Create the topic on the broker and wait until the NameServer routes it (clients read routes there).
    With ACL on, ``credentials`` name an admin account."""

    async def go() -> None:
        async with Admin(namesrv, credentials=credentials) as admin:
            deadline = time.monotonic() + timeout
            while True:  # the broker may not be registered with the NameServer yet
                try:
                    await admin.create_topic(topic, queues)
                    break
                except Exception:
                    if time.monotonic() > deadline:
                        raise
                    await asyncio.sleep(0.1)
            await _wait_route(admin, topic, deadline)

    _run(go())


async def _wait_route(admin: Admin, topic: str, deadline: float) -> dict[str, Any]:
    while True:
        try:
            route = await admin.route(topic)
            if route.get("queueDatas"):
                return route
        except Exception:
            pass
        if time.monotonic() > deadline:
            raise AssertionError(f"the NameServer never routed {topic}")
        await asyncio.sleep(0.05)


def wait_route(namesrv: str, topic: str, timeout: float = 15.0) -> dict[str, Any]:
    async def go() -> dict[str, Any]:
        async with Admin(namesrv) as admin:
            return await _wait_route(admin, topic, time.monotonic() + timeout)

    return _run(go())


def consumer_offsets(namesrv: str, group: str, topic: str) -> dict[int, tuple[int, int]]:
    """queue id -> (broker max offset, committed consumer offset)."""

    async def go() -> dict[int, tuple[int, int]]:
        async with Admin(namesrv) as admin:
            return {p.queue_id: (p.broker_offset, p.consumer_offset) for p in await admin.consumer_progress(group, topic)}

    return _run(go())


def consumer_ids(broker_addr: str, group: str) -> list[str]:
    async def go() -> list[str]:
        client = RemotingClient()
        try:
            resp = await client.invoke(broker_addr, RemotingCommand(
                code=RequestCode.GET_CONSUMER_LIST_BY_GROUP, ext_fields={"consumerGroup": group}), 5.0)
            if resp.code != ResponseCode.SUCCESS:
                return []
            return list(fastjson.loads(resp.body_bytes()).get("consumerIdList", []))
        finally:
            await client.close()

    return _run(go())


def stored_record(broker_addr: str, commit_log_offset: int) -> tuple[int, int]:
    """(sysflag, stored body length) of the record at a CommitLog offset, decoded here by hand from the
    MessageDecoder layout so this check does not lean on the broker's own codec."""

    async def go() -> bytes:
        client = RemotingClient()
        try:
            resp = await client.invoke(broker_addr, RemotingCommand(
                code=RequestCode.VIEW_MESSAGE_BY_ID, ext_fields={"offset": str(commit_log_offset)}), 10.0)
            assert resp.code == ResponseCode.SUCCESS, (resp.code, resp.remark)
            return resp.body_bytes()
        finally:
            await client.close()

    raw = _run(go())
    sysflag = struct.unpack_from(">i", raw, 36)[0]
    pos = 40 + 8  # born timestamp
    pos += 20 if sysflag & 0x10 else 8  # born host (IPv6 flag)
    pos += 8  # store timestamp
    pos += 20 if sysflag & 0x20 else 8  # store host
    pos += 4 + 8  # reconsume times, prepared transaction offset
    body_len = struct.unpack_from(">i", raw, pos)[0]
    return sysflag, body_len

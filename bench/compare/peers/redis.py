"""Redis: the "Kafka + Redis" delay scheme (seed 001) with Streams in Kafka's place.

Delayed messages go into one sorted set (``ZADD delayq <deliver ms> "<dest>|<body>"``). A mover process polls
it every ``POLL_MS`` and moves what is due, in score order, with one Lua script (ZRANGEBYSCORE .. LIMIT, XADD
to ``s:<dest>``, ZREM: atomic, so no loss or duplicate between the two structures). Consumers read the stream
with a consumer group (XREADGROUP, XACK); after a reconnect they first re-read their own pending entries (id 0),
as Redis's documentation says a consumer should after a failure.

Persistence: AOF (``appendonly yes``), ``appendfsync everysec`` (Redis's recommended default); W4 uses
``appendfsync always``, Redis's most durable setting. RSS is the redis-server process (the mover is stateless).
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import redis

from bench.compare.base import ClientBase, ServerBase, free_port, wait_port

POLL_MS = 10
MOVE_BATCH = 1000
PIPE = 500  # commands per pipeline round trip

MOVE_LUA = """
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[2]))
for _, m in ipairs(due) do
  local sep = string.find(m, '|', 1, true)
  redis.call('XADD', 's:' .. string.sub(m, 1, sep - 1), '*', 'b', string.sub(m, sep + 1))
end
if #due > 0 then redis.call('ZREM', KEYS[1], unpack(due)) end
return #due
"""


class Server(ServerBase):
    name = "redis"
    packages = ("redis-server",)
    binary = "/usr/bin/redis-server"
    unsupported: dict[str, str] = {}

    def __init__(self, workdir: Path, durable: bool = False) -> None:
        super().__init__(workdir, durable)
        self.port = free_port()
        self.mover: subprocess.Popen[bytes] | None = None

    @classmethod
    def version(cls) -> str:
        out = subprocess.run([cls.binary, "--version"], capture_output=True, text=True).stdout.split()
        v = next((w.split("=")[1] for w in out if w.startswith("v=")), "?")
        return f"redis-server {v}, redis-py {redis.__version__}"

    def settings(self) -> dict[str, str]:
        return {"appendonly": "yes", "appendfsync": "always" if self.durable else "everysec",
                "save": '"" (no RDB snapshots; AOF only)', "maxmemory": "0 (no limit), noeviction",
                "mover": f"poll every {POLL_MS} ms when idle, {MOVE_BATCH} per Lua call (ZRANGEBYSCORE+XADD+ZREM)",
                "client": f"redis-py, pipelines of {PIPE}; XREADGROUP COUNT 256 BLOCK 100 + XACK"}

    def start(self) -> None:
        data = self.workdir / "data"
        data.mkdir(parents=True, exist_ok=True)
        conf = self.workdir / "redis.conf"
        conf.write_text(f"""bind 127.0.0.1
port {self.port}
protected-mode yes
daemonize no
dir {data}
save ""
appendonly yes
appendfsync {"always" if self.durable else "everysec"}
maxmemory-policy noeviction
""")
        proc = self.popen([self.binary, str(conf)])
        wait_port(self.port, 30, proc, "redis-server")
        r = redis.Redis(port=self.port)
        deadline = time.monotonic() + 60
        while True:  # loading the AOF answers LOADING
            try:
                r.ping()
                break
            except redis.exceptions.BusyLoadingError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        r.close()
        if self.mover is None or self.mover.poll() is not None:
            log = open(self.workdir / "mover.log", "ab")
            self.mover = subprocess.Popen([sys.executable, "-m", "bench.compare.peers.redis_mover", str(self.port),
                                           str(POLL_MS), str(MOVE_BATCH)], stdout=log, stderr=subprocess.STDOUT,
                                          cwd=Path(__file__).resolve().parents[3])
            log.close()

    def stop(self, timeout: float = 30.0) -> None:
        if self.mover is not None:
            self.mover.terminate()
            try:
                self.mover.wait(10)
            except subprocess.TimeoutExpired:
                self.mover.kill()
                self.mover.wait(5)
            self.mover = None
        super().stop(timeout)

    def conn(self) -> dict[str, Any]:
        return {"port": self.port}


class Client(ClientBase):
    def __init__(self, conn: dict[str, Any]) -> None:
        super().__init__(conn)
        self.r = redis.Redis(port=conn["port"], socket_timeout=10)
        self.on_ready: Callable[[], None] | None = None

    def setup(self, dest: str, scheduled: bool) -> None:
        try:
            self.r.xgroup_create(f"s:{dest}", "g", id="0", mkstream=True)
        except redis.exceptions.ResponseError as e:
            if "BUSYGROUP" not in str(e):
                raise

    def _pipelined(self, cmds: Iterable[Callable[[Any], None] | None]) -> int:
        n = 0
        pipe = self.r.pipeline(transaction=False)
        k = 0
        for add in cmds:
            if add is None:  # a pause in the stream: send what we hold
                if k:
                    pipe.execute()
                    n += k
                    k = 0
                continue
            add(pipe)
            k += 1
            if k == PIPE:
                pipe.execute()
                n += k
                k = 0
        if k:
            pipe.execute()
            n += k
        return n

    def publish(self, dest: str, bodies: Iterable[bytes | None]) -> int:
        key = f"s:{dest}"
        return self._pipelined(None if b is None else (lambda p, b=b: p.xadd(key, {"b": b})) for b in bodies)

    def schedule(self, dest: str, items: Iterable[tuple[int, bytes, str]], durable: bool = False) -> int:
        prefix = dest.encode() + b"|"
        return self._pipelined((lambda p, d=d, b=b: p.zadd("delayq", {prefix + b: d})) for d, b, _k in items)

    def consume(self, dest: str, on_body: Callable[[bytes], None], stop: Callable[[], bool], ordered: bool = False) -> None:
        key = f"s:{dest}"
        first = True
        start_id = "0"  # own pending entries first (after a reconnect), then new ones
        while not stop():
            try:
                if first and self.on_ready:
                    self.r.ping()
                    self.on_ready()
                    first = False
                res = self.r.xreadgroup("g", "c1", {key: start_id}, count=256, block=100 if start_id == ">" else None)
                entries = res[0][1] if res else []
                if start_id == "0" and not entries:
                    start_id = ">"
                    continue
                ids = []
                for eid, fields in entries:
                    ids.append(eid)
                    if fields:
                        on_body(fields[b"b"])
                if ids:
                    self.r.xack(key, "g", *ids)
                    if start_id == "0":
                        start_id = ids[-1]  # page through our pending list
            except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError,
                    redis.exceptions.BusyLoadingError):
                start_id = "0"
                time.sleep(0.05)

    def close(self) -> None:
        self.r.close()

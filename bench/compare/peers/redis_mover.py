"""The Redis delay scheme's mover: due members of the sorted set ``delayq`` -> streams, atomically (Lua).

    python -m bench.compare.peers.redis_mover PORT POLL_MS BATCH
"""

from __future__ import annotations

import sys
import time

import redis

from bench.compare.peers.redis import MOVE_LUA


def main() -> None:
    port, poll_ms, batch = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    r = redis.Redis(port=port, socket_timeout=10)
    move = r.register_script(MOVE_LUA)
    while True:
        try:
            n = move(keys=["delayq"], args=[int(time.time() * 1000), batch])
        except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, redis.exceptions.BusyLoadingError):
            time.sleep(0.05)
            continue
        if n < batch:
            time.sleep(poll_ms / 1000)


if __name__ == "__main__":
    main()

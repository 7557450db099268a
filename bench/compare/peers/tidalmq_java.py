"""TidalMQ (the ``tidalmq`` peer's standalone and settings) driven by the Java load generator: RocketMQ's
official remoting client (bench/compare/jload.py). W1 and W2; W3..W5 are the broker's, measured through the
Python client by the ``tidalmq`` peer."""

from __future__ import annotations

from bench.compare import jload
from bench.compare.peers import tidalmq
from bench.compare.peers.jvm import missing_java

workloads = jload  # run.py runs this module's W1 and W2
# bench/pending_bench.py's enqueue: timer messages in batches of this many (the broker takes them; RocketMQ
# refuses delays in batches, so rocketmq_java sends them one by one)
TIMER_BATCH = jload.BATCH
SAME = "the broker of the peer tidalmq: measured there, through tidalmq.client"


class Server(tidalmq.Server):
    name = "tidalmq_java"
    unsupported = {"W3": SAME, "W4": SAME, "W5": SAME}

    @classmethod
    def available(cls) -> str | None:
        return missing_java()

    def settings(self) -> dict[str, str]:
        return {**super().settings(), **jload.settings()}


Client = tidalmq.Client  # topic creation (setup) only

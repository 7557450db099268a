"""Apache RocketMQ 5 (the ``rocketmq_p100`` peer: its timer at ``timerPrecisionMs=100``) driven by the Java
load generator, its own official remoting client (bench/compare/jload.py). W1 and W2; W3..W5 are the broker's,
measured through tidalmq.client by the ``rocketmq`` peers."""

from __future__ import annotations

from bench.compare import jload
from bench.compare.peers import rocketmq_p100

workloads = jload  # run.py runs this module's W1 and W2
SAME = "the broker of the peer rocketmq_p100: measured there, through tidalmq.client"


class Server(rocketmq_p100.Server):
    name = "rocketmq_java"
    unsupported = {"W3": SAME, "W4": SAME, "W5": SAME}

    def settings(self) -> dict[str, str]:
        return {**super().settings(), **jload.settings()}


Client = rocketmq_p100.Client  # topic creation (setup) only

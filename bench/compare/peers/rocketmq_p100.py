"""Apache RocketMQ 5 with its timer at ``timerPrecisionMs=100`` (the peer ``rocketmq`` runs the default, 1000):
the same broker, NameServer and client (bench/compare/peers/rocketmq.py)."""

from __future__ import annotations

from bench.compare.peers import rocketmq


class Server(rocketmq.Server):
    name = "rocketmq_p100"
    precision_ms = 100
    quick_skip: dict[str, str] = {}


Client = rocketmq.Client

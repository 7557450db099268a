"""RocketMQ's broker statistics names (BrokerStatsManager / Stats) and their keys: what the broker counts
(broker/stats.py) and the tools ask for by VIEW_BROKER_STATS_DATA (mqadmin statsAll)."""

from __future__ import annotations

TOPIC_PUT_NUMS = "TOPIC_PUT_NUMS"  # key: the topic
TOPIC_PUT_SIZE = "TOPIC_PUT_SIZE"
GROUP_GET_NUMS = "GROUP_GET_NUMS"  # key: topic@group
GROUP_GET_SIZE = "GROUP_GET_SIZE"
BROKER_PUT_NUMS = "BROKER_PUT_NUMS"  # key: the cluster name
BROKER_GET_NUMS = "BROKER_GET_NUMS"


def stats_key(topic: str, group: str) -> str:
    """BrokerStatsManager.buildStatsKey(topic, group)."""
    return f"{topic}@{group}"

"""The store's put and get counters (RocketMQ's StoreStatsService), as getRuntimeInfo reports them."""

from __future__ import annotations


class StoreStatsService:
    """Counters the put path and the read path add to (each from its own thread; read whole by admin)."""

    def __init__(self) -> None:
        self.counts = {"putMessageTimesTotal": 0, "putMessageSizeTotal": 0, "getMessageTimesTotalFound": 0,
                       "getMessageTimesTotalMiss": 0, "getMessageTransferedMsgCount": 0}

    def runtime_info(self) -> dict[str, str]:
        return {k: str(v) for k, v in self.counts.items()}

"""The broker's statistics, as RocketMQ's BrokerStatsManager keeps them: per-topic put counts and bytes
(``TOPIC_PUT_NUMS``, ``TOPIC_PUT_SIZE``, key: the topic), per ``topic@group`` get counts and bytes
(``GROUP_GET_NUMS``, ``GROUP_GET_SIZE``), the broker's totals (``BROKER_PUT_NUMS``, ``BROKER_GET_NUMS``,
key: the cluster name), each with RocketMQ's StatsItem windows: a snapshot every 10 s kept 7 deep (the
last minute), every 10 min kept 7 deep (the last hour), every hour kept 25 deep (the last day). A window's
``sum`` is the newest snapshot minus the oldest, its ``tps`` that sum per second, its ``avgpt`` the sum per
call. An item's first snapshot in a window is preceded by a zero one dated one period earlier, so a key
new to the broker shows its whole count at its first sample.

Beside them the store's per-second figures behind GET_BROKER_RUNTIME_INFO's ``putTps`` and
``getTransferedTps`` (RocketMQ 4's StoreStatsService): a snapshot of the broker's put and get totals every
second, 601 kept; each key is ``"tps10 tps60 tps600"`` (RocketMQ's Double.toString, a part empty while there
are too few snapshots).

The send and pull paths count once per request (a batch adds its message count in one step), into plain
attributes; the sampling runs on the broker's loop (``run``). The Prometheus counters (broker/metrics/broker_metrics.py)
read the same items: one source of counts.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass

from tidalmq.common.stats_keys import (
    BROKER_GET_NUMS,
    BROKER_PUT_NUMS,
    GROUP_GET_NUMS,
    GROUP_GET_SIZE,
    TOPIC_PUT_NUMS,
    TOPIC_PUT_SIZE,
    stats_key,
)

__all__ = ["BrokerStats", "StatsItem", "StatsItemSet", "StatsSnapshot", "GROUP_GET_NUMS", "GROUP_GET_SIZE",
           "TOPIC_PUT_NUMS", "TOPIC_PUT_SIZE"]

# (period of the sampling, snapshots kept) per window, as RocketMQ's StatsItem
MINUTE = (10_000, 7)
HOUR = (600_000, 7)
DAY = (3_600_000, 25)
STORE_SAMPLES = 601  # StoreStatsService: one a second, MAX_RECORDS_OF_SAMPLING + 1


_NO_ITEMS: dict[str, tuple[StatsItem, StatsItem]] = {}


@dataclass
class StatsSnapshot:
    sum: int = 0
    tps: float = 0.0
    avgpt: float = 0.0
    times: int = 0


class StatsItem:
    """One key's running value (the count or bytes added) and times (the calls that added), with the
    snapshots of its three windows: (ms, times, value)."""

    __slots__ = ("value", "times", "minute", "hour", "day")

    def __init__(self) -> None:
        self.value = 0
        self.times = 0
        self.minute: deque[tuple[int, int, int]] = deque(maxlen=MINUTE[1])
        self.hour: deque[tuple[int, int, int]] = deque(maxlen=HOUR[1])
        self.day: deque[tuple[int, int, int]] = deque(maxlen=DAY[1])

    def sample(self, window: deque[tuple[int, int, int]], period_ms: int, now_ms: int) -> None:
        if not window:
            window.append((now_ms - period_ms, 0, 0))
        window.append((now_ms, self.times, self.value))

    @staticmethod
    def compute(window: deque[tuple[int, int, int]]) -> StatsSnapshot:
        if not window:
            return StatsSnapshot()
        (t0, times0, v0), (t1, times1, v1) = window[0], window[-1]
        total, calls = v1 - v0, times1 - times0
        tps = total * 1000.0 / (t1 - t0) if t1 != t0 else 0.0
        return StatsSnapshot(total, tps, total / calls if calls > 0 else 0.0, calls)

    def in_minute(self) -> StatsSnapshot:
        return self.compute(self.minute)

    def in_hour(self) -> StatsSnapshot:
        return self.compute(self.hour)

    def in_day(self) -> StatsSnapshot:
        return self.compute(self.day)


class StatsItemSet(dict[str, StatsItem]):
    """RocketMQ's StatsItemSet: the items of one stats name by key, created at their first value
    (BrokerStats.on_put / on_get)."""

    def __init__(self, name: str) -> None:
        super().__init__()
        self.name = name

    def tps_in_minute(self, key: str) -> float:
        item = self.get(key)
        return item.in_minute().tps if item is not None else 0.0

    def drop(self, match: str, how: str) -> None:
        """delValue / delValueByPrefixKey / delValueBySuffixKey with RocketMQ's ``@`` separator."""
        for key in list(self):
            if (how == "key" and key == match or how == "prefix" and key.startswith(match + "@")
                    or how == "suffix" and key.endswith("@" + match)):
                del self[key]


def java_double(x: float) -> str:
    """Java's Double.toString for the values a TPS takes (plain decimals; E notation out of range)."""
    if x == 0 or 1e-3 <= abs(x) < 1e7:
        return repr(float(x))
    mantissa, exp = f"{x:.17e}".split("e")
    return f"{float(mantissa)!r}E{int(exp)}"


class BrokerStats:
    """The broker's StatsItemSets and the store's per-second totals."""

    def __init__(self, cluster_name: str) -> None:
        self.cluster = cluster_name
        self.sets: dict[str, StatsItemSet] = {
            name: StatsItemSet(name) for name in (TOPIC_PUT_NUMS, TOPIC_PUT_SIZE, GROUP_GET_NUMS, GROUP_GET_SIZE,
                                                  BROKER_PUT_NUMS, BROKER_GET_NUMS)}
        self.put_nums, self.put_size = self.sets[TOPIC_PUT_NUMS], self.sets[TOPIC_PUT_SIZE]
        self.get_nums, self.get_size = self.sets[GROUP_GET_NUMS], self.sets[GROUP_GET_SIZE]
        # the broker's totals, counted apart (one addition per request) and copied into their items at
        # each sample: BROKER_PUT_NUMS / BROKER_GET_NUMS add values only, as RocketMQ's do
        self.put_total = 0
        self.get_total = 0
        self._store: deque[tuple[int, int, int]] = deque(maxlen=STORE_SAMPLES)  # (ms, puts, gets)
        self._put_items: dict[str, tuple[StatsItem, StatsItem]] = {}  # topic -> its two items
        self._get_items: dict[str, dict[str, tuple[StatsItem, StatsItem]]] = {}
        # RocketMQ's BrokerStats: the totals at the last two local midnights (0 until one has passed), behind
        # the runtime info's msgPut/GetTotalYesterdayMorning and ...TodayMorning (mqadmin clusterList -m)
        self.put_yesterday_morning = self.put_today_morning = 0
        self.get_yesterday_morning = self.get_today_morning = 0

    # counting (the send and pull paths) ----------------------------------------------------------
    def on_put(self, topic: str, count: int, size: int) -> None:
        pair = self._put_items.get(topic)
        if pair is None:
            pair = self._put_items[topic] = (self.put_nums.setdefault(topic, StatsItem()),
                                             self.put_size.setdefault(topic, StatsItem()))
        nums, sz = pair
        nums.value += count
        nums.times += 1
        sz.value += size
        sz.times += 1
        self.put_total += count

    def on_get(self, group: str, topic: str, count: int, size: int) -> None:
        # group -> topic -> its two items: found without building the "topic@group" key on each pull
        pair = self._get_items.get(group, _NO_ITEMS).get(topic)
        if pair is None:
            pair = self._new_get_items(group, topic)
        nums, sz = pair
        nums.value += count
        nums.times += 1
        sz.value += size
        sz.times += 1
        self.get_total += count

    def _new_get_items(self, group: str, topic: str) -> tuple[StatsItem, StatsItem]:
        key = stats_key(topic, group)
        nums = self.get_nums.get(key) or self.get_nums.setdefault(key, StatsItem())
        sz = self.get_size.get(key) or self.get_size.setdefault(key, StatsItem())
        self._get_items.setdefault(group, {})[topic] = (nums, sz)
        return nums, sz

    # reading -------------------------------------------------------------------------------------
    def item(self, name: str, key: str) -> StatsItem | None:
        """BrokerStatsManager.getStatsItem: None for an unknown name or a key never counted."""
        s = self.sets.get(name)
        return s.get(key) if s is not None else None

    def per_topic(self, name: str) -> dict[str, int]:
        """The running value per topic of a set (GROUP_* keys ``topic@group`` summed per topic)."""
        out: dict[str, int] = {}
        for key, it in list(self.sets[name].items()):
            topic = key.split("@", 1)[0]
            out[topic] = out.get(topic, 0) + it.value
        return out

    def per_key(self, name: str) -> dict[str, int]:
        """The running value of every key of a set."""
        return {key: it.value for key, it in list(self.sets[name].items())}

    def tps_topic_put(self, topic: str) -> float:
        return self.put_nums.tps_in_minute(topic)

    def tps_group_get(self, group: str, topic: str) -> float:
        return self.get_nums.tps_in_minute(stats_key(topic, group))

    def put_tps(self) -> str:
        return self._tps(1)

    def get_transfered_tps(self) -> str:
        return self._tps(2)

    def _tps(self, col: int) -> str:
        samples = self._store
        parts = []
        for span in (10, 60, 600):
            if len(samples) > span:
                first, last = samples[-(span + 1)], samples[-1]
                parts.append(java_double((last[col] - first[col]) * 1000.0 / max(1, last[0] - first[0])))
            else:
                parts.append("")
        return " ".join(parts)

    # housekeeping --------------------------------------------------------------------------------
    def on_topic_deleted(self, topic: str) -> None:
        self._get_items = {g: {t: p for t, p in ts.items() if t != topic} for g, ts in self._get_items.items()}
        self._put_items.pop(topic, None)
        self.put_nums.drop(topic, "key")
        self.put_size.drop(topic, "key")
        self.get_nums.drop(topic, "prefix")
        self.get_size.drop(topic, "prefix")

    def on_group_deleted(self, group: str) -> None:
        self._get_items.pop(group, None)
        self.get_nums.drop(group, "suffix")
        self.get_size.drop(group, "suffix")

    def _items(self) -> Iterator[StatsItem]:
        for s in self.sets.values():
            yield from list(s.values())

    def sample(self, window: str, now_ms: int | None = None) -> None:
        """One sampling round of a window ("minute", "hour", "day") over every item."""
        now = int(time.time() * 1000) if now_ms is None else now_ms
        for name, total in ((BROKER_PUT_NUMS, self.put_total), (BROKER_GET_NUMS, self.get_total)):
            it = self.sets[name].get(self.cluster)
            if it is None:
                it = self.sets[name][self.cluster] = StatsItem()
            it.value = total
        period = {"minute": MINUTE, "hour": HOUR, "day": DAY}[window][0]
        for it in self._items():
            it.sample(getattr(it, window), period, now)

    def record_morning(self) -> None:
        """BrokerStats.record, run at each local midnight."""
        self.put_yesterday_morning, self.get_yesterday_morning = self.put_today_morning, self.get_today_morning
        self.put_today_morning, self.get_today_morning = self.put_total, self.get_total

    def sample_store(self, now_ms: int | None = None) -> None:
        now = int(time.time() * 1000) if now_ms is None else now_ms
        self._store.append((now, self.put_total, self.get_total))

    async def run(self) -> None:
        """The sampling, on the broker's loop: the store's every second, the minute window every 10 s,
        the hour's every 10 min, the day's every hour; all of them at once at the start, as RocketMQ's
        schedules begin with no delay."""
        loop = asyncio.get_running_loop()
        start = loop.time()
        tick = 0
        morning = next_midnight(time.time())
        while True:
            if time.time() >= morning:
                self.record_morning()
                morning = next_midnight(time.time())
            self.sample_store()
            if tick % 10 == 0:
                self.sample("minute")
            if tick % 600 == 0:
                self.sample("hour")
            if tick % 3600 == 0:
                self.sample("day")
            tick += 1
            await asyncio.sleep(max(0.0, start + tick - loop.time()))


def next_midnight(now: float) -> float:
    """The next local midnight after ``now`` (seconds since the epoch): RocketMQ's computeNextMorningTimeMillis."""
    t = time.localtime(now)
    return time.mktime((t.tm_year, t.tm_mon, t.tm_mday + 1, 0, 0, 0, 0, 0, -1))

"""Planning of reads, pure: queue ranges into input partitions, and a trigger's message budget over queues."""

from __future__ import annotations

QueueKey = tuple[str, str, int]


def split_ranges(ranges: dict[QueueKey, tuple[int, int]], max_per_partition: int,
                 min_partitions: int = 0) -> list[tuple[QueueKey, int, int]]:
    """One partition per queue with data, a large range cut into pieces of at most ``max_per_partition``
    messages; with ``min_partitions``, the largest pieces are halved until there are that many."""
    out: list[tuple[QueueKey, int, int]] = []
    for key in sorted(ranges):
        start, end = ranges[key]
        if end <= start:
            continue
        n = -(-(end - start) // max_per_partition)
        step = -(-(end - start) // n)
        for lo in range(start, end, step):
            out.append((key, lo, min(end, lo + step)))
    while min_partitions and 0 < len(out) < min_partitions:
        i = max(range(len(out)), key=lambda j: out[j][2] - out[j][1])
        key, lo, hi = out[i]
        if hi - lo < 2:
            break
        mid = lo + (hi - lo) // 2
        out[i : i + 1] = [(key, lo, mid), (key, mid, hi)]
    return out


def rate_limit(start: dict[QueueKey, int], latest: dict[QueueKey, int], max_messages: int) -> dict[QueueKey, int]:
    """End offsets admitting at most ``max_messages`` in all, shared out in proportion to each queue's
    backlog (as Kafka's source does), at least one message for a queue with a backlog while budget lasts."""
    backlog = {k: max(0, latest[k] - start.get(k, latest[k])) for k in latest}
    total = sum(backlog.values())
    if total <= max_messages:
        return dict(latest)
    end: dict[QueueKey, int] = {}
    budget = max_messages
    for k in sorted(latest):
        s = start.get(k, latest[k])
        share = min(backlog[k], budget, max(1, backlog[k] * max_messages // total)) if backlog[k] else 0
        budget -= share
        end[k] = s + share
    return end


def hold_back(waiting: int, min_messages: int, last_trigger: float | None, now: float, max_delay_s: float) -> bool:
    """Kafka's ``minOffsetsPerTrigger``: skip this trigger while fewer than ``min_messages`` wait, unless
    ``max_delay_s`` has passed since the last batch (``maxTriggerDelay``). As Kafka's source, the first
    trigger of a query is not held (there is no last batch to measure the delay from), and nothing waiting
    is never a batch."""
    if waiting == 0:
        return True
    if waiting >= min_messages or last_trigger is None:
        return False
    return now - last_trigger < max_delay_s

"""The five workloads, written once against the peer interface (bench/compare/base.py).

Producers run in this process; each consumer runs in a spawned worker process (its own interpreter, so the
producer's and the consumer's Python do not share a GIL), started and subscribed before the first send. All
times are wall clock (``time.time``) on the same machine.
"""

from __future__ import annotations

import importlib
import math
import multiprocessing as mp
import os
import queue
import random
import time
from array import array
from collections.abc import Iterator
from typing import Any

from bench.common import cpu_s, percentile, settled_cpu_s
from bench.compare.base import SCHED_BODY, ServerBase

W1_BODY = 1024


def now_ms() -> float:
    return time.time() * 1000


def server_cpu_s(server: ServerBase) -> float:
    """CPU seconds used so far by the broker's process and every live process under it (TidalMQ's schedule
    process, say), to the nanosecond (``bench.common.cpu_s``). Runs before 2026-11-27 counted 10 ms clock
    ticks of the broker's process alone: a live child's CPU was not in the figure."""
    return cpu_s(server.server_pid())


def per_core(rate: float, cpu_seconds: float, wall_s: float) -> dict[str, float]:
    """The broker's cores used over a phase (CPU seconds / wall seconds) and the rate per core used."""
    cores = cpu_seconds / wall_s if wall_s > 0 else float("nan")
    return {"cores": cores, "per_core": rate / cores if cores > 0 else float("nan")}


def client_of(peer: str, conn: dict[str, Any]) -> Any:
    return importlib.import_module(f"bench.compare.peers.{peer}").Client(conn)


# --------------------------------------------------------------------------------------------------- consumer
def _consume_worker(peer: str, conn: dict[str, Any], dest: str, expected: int | None, deadline: float, grace: float,
                    ordered: bool, due_by: float, q: Any, plan_q: Any) -> None:
    """Receive until ``expected`` distinct ids with field 2 (the deliver time) <= ``due_by`` arrived (+``grace``
    s for duplicates) or ``deadline``; put [(id, recv ms, field 2 of the body)] on ``q``. ``expected`` None:
    (expected, deadline, due_by) come later on ``plan_q`` (Consumer.plan), before the first message."""
    # Columns, not a tuple a message: a full collection walks every tracked object, and tens of thousands
    # of tuples made the consumer stand still 20-45 ms in W2's window (docs/benchmarks.md, 2026-12-04),
    # which was then measured as every peer's lateness.
    ids, recv_ms, field2 = array("q"), array("d"), array("d")
    seen: set[int] = set()
    done_at = [0.0]
    plan: dict[str, float] = {} if expected is None else {"expected": expected, "deadline": deadline, "due_by": due_by}

    def planned(wait: float) -> bool:
        if not plan:
            try:
                plan.update(zip(("expected", "deadline", "due_by"), plan_q.get(timeout=wait), strict=True))
            except queue.Empty:
                return False
        return True

    try:
        cl = client_of(peer, conn)
        cl.on_ready = lambda: q.put("ready")

        def on_body(b: bytes) -> None:
            t = time.time() * 1000
            parts = b.split(b"|", 2)
            i = int(parts[0])
            f2 = float(parts[1])
            ids.append(i)
            recv_ms.append(t)
            field2.append(f2)
            if not planned(30):
                raise RuntimeError("a message arrived, the plan did not")
            if f2 <= plan["due_by"]:
                seen.add(i)
            if len(seen) >= plan["expected"] and not done_at[0]:
                done_at[0] = time.time()

        def stop() -> bool:
            now = time.time()
            if not planned(0.001):
                return now > deadline
            return now > plan["deadline"] or (done_at[0] > 0 and now > done_at[0] + grace)

        cl.consume(dest, on_body, stop, ordered)
        cl.close()
        q.put(list(zip(ids, recv_ms, field2, strict=True)))
    except BaseException as e:  # reported by the harness
        q.put(("error", f"{type(e).__name__}: {e}", list(zip(ids, recv_ms, field2, strict=True))))


class Consumer:
    """A consumer in a process of its own, up and subscribed when the constructor returns. ``expected``
    None: what to wait for is given later by ``plan`` (before anything is sent); ``deadline`` bounds the
    wait until then."""

    def __init__(self, peer: str, conn: dict[str, Any], dest: str, expected: int | None, deadline: float,
                 grace: float = 0.0, ordered: bool = False, due_by: float = float("inf")) -> None:
        ctx = mp.get_context("spawn")
        self.q = ctx.Queue()
        self.plan_q = ctx.Queue()
        self.p = ctx.Process(target=_consume_worker, args=(peer, conn, dest, expected, deadline, grace, ordered, due_by,
                                                           self.q, self.plan_q), daemon=True)
        self.p.start()
        self.deadline = deadline
        first = self.q.get(timeout=90)
        if first != "ready":
            self.p.join(5)
            raise RuntimeError(f"consumer failed to start: {first[1] if isinstance(first, tuple) else first}")

    def plan(self, expected: int, deadline: float, due_by: float) -> None:
        self.plan_q.put((expected, deadline, due_by))
        self.deadline = deadline

    def result(self) -> list[tuple[int, float, float]]:
        wait = max(5.0, self.deadline - time.time() + 30)
        r = self.q.get(timeout=wait)
        self.p.join(10)
        if self.p.is_alive():
            self.p.kill()
        if isinstance(r, tuple) and r and r[0] == "error":
            if r[2]:
                return r[2]
            raise RuntimeError(f"consumer: {r[1]}")
        return r


def sched_body(i: int, deliver: int, key: str = "") -> bytes:
    head = f"{i}|{deliver}|{key}|".encode()
    return head + b"x" * max(0, SCHED_BODY - len(head))


# --------------------------------------------------------------------------------------------------- W1
def w1(server: ServerBase, peer: str, quick: bool) -> dict[str, Any]:
    """1 KiB messages, one producer (as fast as it goes, pipelined/async where the client can), one consumer:
    produced and consumed msgs/s; then end-to-end latency p50/p99 at a paced 1,000 msgs/s."""
    n = 5_000 if quick else 30_000
    paced_rate, paced_s = 1_000, (2 if quick else 5)
    pad = os.urandom(W1_BODY // 2).hex().encode()
    cl = client_of(peer, server.conn())
    out: dict[str, Any] = {}
    try:
        for dest in ("w1t", "w1l"):
            cl.setup(dest, False)
        # throughput
        cons = Consumer(peer, server.conn(), "w1t", n, time.time() + (60 if quick else 120))

        def bodies() -> Iterator[bytes]:
            for i in range(n):
                head = f"{i}|{time.time() * 1000:.3f}|".encode()
                yield head + pad[: W1_BODY - len(head)]

        c0 = server_cpu_s(server)
        t0 = time.time()
        cl.publish("w1t", bodies())
        t_pub = time.time() - t0
        c_pub = server_cpu_s(server) - c0
        got = cons.result()
        last = max((r for _, r, _ in got), default=t0 * 1000)
        uniq = len({i for i, _, _ in got})
        out.update(produced_per_s=n / t_pub, consumed_per_s=uniq / max(1e-3, (last / 1000 - t0)),
                   n=n, received=uniq, produce_broker_cpu_s=c_pub)
        pc = per_core(n / t_pub, c_pub, t_pub)
        out.update(produce_broker_cores=pc["cores"], produced_per_core=pc["per_core"])
        # latency at a paced rate
        m = paced_rate * paced_s
        cons = Consumer(peer, server.conn(), "w1l", m, time.time() + paced_s + 60)

        def paced() -> Iterator[bytes | None]:
            start = time.time()
            for i in range(m):
                target = start + i / paced_rate
                d = target - time.time()
                if d > 0:
                    yield None  # nothing more for now: a buffering client sends what it holds
                    time.sleep(d)
                head = f"{i}|{time.time() * 1000:.3f}|".encode()
                yield head + pad[: W1_BODY - len(head)]

        cl.publish("w1l", paced())
        got = cons.result()
        lat = sorted(r - s for _, r, s in got)
        out.update(paced_rate=paced_rate, paced_n=m, paced_received=len({i for i, _, _ in got}),
                   lat_p50_ms=percentile(lat, 50), lat_p99_ms=percentile(lat, 99))
    finally:
        cl.close()
    return out


# --------------------------------------------------------------------------------------------------- W2
def log_uniform_ms(lo_s: float, hi_s: float) -> int:
    return int(math.exp(random.uniform(math.log(lo_s), math.log(hi_s))) * 1000)


def w2(server: ServerBase, peer: str, quick: bool, budget_s: float) -> dict[str, Any]:
    """Enqueue rate of delayed messages (delays 1 min .. 1 h); then lateness at 1,000 and 10,000 due per second.

    For a rate R and a window of W seconds starting at T0: R*W messages due uniformly in [T0, T0+W] plus R*W/2
    background messages whose delays are log-uniform between 1 s and 1 h (the mix), all sent in random order
    before T0. Lateness (receive time - deliver time at the consumer) is measured over every message due in
    [T0, T0+W] (the window's messages and the background ones falling due in it), and separately over the
    background messages that fell due before T0, while the enqueue burst was running."""
    t_budget = time.time() + budget_s
    out: dict[str, Any] = {"series": {}}
    cl = client_of(peer, server.conn())
    try:
        cl.setup("w2enq", True)
        # 100,000: 10,000 took the fastest peers ~70 ms, a figure of their ramp-up more than of their rate
        n = 2_000 if quick else 100_000
        base = int(now_ms())
        items = [(base + random.randint(60_000, 3_600_000), sched_body(i, 0), "") for i in range(n)]
        for k, (d, _b, _) in enumerate(items):
            items[k] = (d, sched_body(k, d), "")
        c0 = server_cpu_s(server)
        t0 = time.time()
        cl.schedule("w2enq", items)
        took = time.time() - t0
        rate = n / took
        out["enqueue_per_s"] = rate
        out["enqueue_n"] = n
        c_acked = server_cpu_s(server) - c0
        c_settled, settle_s = settled_cpu_s(lambda: server_cpu_s(server))
        out["enqueue_broker_cpu_s"] = c_enq = c_settled - c0
        out.update(enqueue_acked_cpu_s=c_acked, enqueue_settle_s=settle_s)
        # cores used while the client sent; per core: the messages over all the CPU they cost, the work
        # left after the last acknowledgement included
        out.update(enqueue_broker_cores=c_acked / took, enqueue_per_core=n / c_enq if c_enq > 0 else float("nan"))
        plan = ((1_000, 3 if quick else 10), (10_000, 1 if quick else 5))
        for due_rate, window in plan:
            key = f"r{due_rate}"
            total = due_rate * window + due_rate * window // 2
            send_s = total / rate * 1.3 + 2
            if time.time() + send_s + window + 15 > t_budget:
                out[key] = {"skipped": f"would not fit the time budget (sending {total} at {rate:.0f}/s)"}
                continue
            dest = f"w2r{due_rate}"
            cl.setup(dest, True)
            grace = 10.0 if not quick else 5.0
            # The consumer (a process of its own, ~0.25 s to start) is up before the deliver times are drawn,
            # so that the background delays count from when the sends begin (sent_at_est), as they mean to.
            cons = Consumer(peer, server.conn(), dest, None, time.time() + send_s + window + 120)
            t_start = int(now_ms() + send_s * 1000)
            deliver = [t_start + int(i * 1000 / due_rate) for i in range(due_rate * window)]
            sent_at_est = now_ms()
            bg = [int(sent_at_est + log_uniform_ms(1, 3600)) for _ in range(due_rate * window // 2)]
            deliver += bg
            random.shuffle(deliver)
            end = t_start + window * 1000
            expected = sum(1 for d in deliver if d <= end)
            cons.plan(expected, end / 1000 + grace, end)
            ts = time.time()
            cl.schedule(dest, [(d, sched_body(i, d), "") for i, d in enumerate(deliver)])
            sent_s = time.time() - ts
            overrun_ms = max(0.0, now_ms() - t_start)  # > 0: sending had not finished at T0
            got = cons.result()
            first_seen: dict[int, tuple[float, float]] = {}
            for i, r, d in got:
                if d <= end and i not in first_seen:
                    first_seen[i] = (d, r - d)
            if os.environ.get("COMPARE_DEBUG"):
                miss = sorted(d for i, d in enumerate(deliver) if d <= end and i not in first_seen)
                print(f"  debug {peer} {key}: T0 {t_start} end {end} missing (ms rel T0): "
                      f"{[int(d - t_start) for d in miss[:30]]}")
            # the window [T0, T0+W]: the due rate asked for, nothing else running
            lat = sorted(x for d, x in first_seen.values() if d >= t_start)
            exp_w = sum(1 for d in deliver if t_start <= d <= end)
            # background messages that fell due before T0, i.e. while the enqueue burst was running
            burst = sorted(x for d, x in first_seen.values() if d < t_start)
            # A burst message can be sent after its deliver time (its delay is counted from before the
            # send began): no broker can deliver it before it arrives. Its lateness counted from
            # max(deliver time, its estimated send time: the sends go out in index order at a steady rate)
            # is what the broker added.
            first_seen_i: dict[int, float] = {}
            for i, r, d in got:
                if d < t_start and i not in first_seen_i:
                    first_seen_i[i] = r - max(d, ts * 1000 + sent_s * 1000 * i / len(deliver))
            burst_adj = sorted(first_seen_i.values())
            sent_late = sum(1 for i, d in enumerate(deliver) if d < ts * 1000 + sent_s * 1000 * i / len(deliver))
            exp_b = expected - exp_w
            out[key] = {"due_rate": due_rate, "window_s": window, "sent": total, "send_s": sent_s,
                        "late_start_ms": overrun_ms,
                        "expected": exp_w, "delivered": len(lat), "missing": exp_w - len(lat),
                        "grace_s": grace, "p50_ms": percentile(lat, 50), "p99_ms": percentile(lat, 99),
                        "max_ms": lat[-1] if lat else float("nan"),
                        "early": sum(1 for _, x in first_seen.values() if x < 0),
                        "burst_expected": exp_b, "burst_delivered": len(burst), "burst_missing": exp_b - len(burst),
                        "burst_p50_ms": percentile(burst, 50), "burst_p99_ms": percentile(burst, 99),
                        "burst_max_ms": burst[-1] if burst else float("nan"),
                        "burst_sent_after_due": sent_late,
                        "burst_from_send_p99_ms": percentile(burst_adj, 99),
                        "burst_from_send_max_ms": burst_adj[-1] if burst_adj else float("nan"),
                        "duplicates": len(got) - len({i for i, _, _ in got})}
            out["series"][key] = sorted(v for v in first_seen.values() if v[0] >= t_start)
    finally:
        cl.close()
    return out


# --------------------------------------------------------------------------------------------------- W3
def w3(server: ServerBase, peer: str, quick: bool, budget_s: float) -> dict[str, Any]:
    """RSS of the broker with N pending delayed messages (due in 1 h .. 2 h, 100-byte bodies), per message."""
    target = 100_000 if quick else 1_000_000
    cl = client_of(peer, server.conn())
    try:
        cl.setup("w3", True)
        time.sleep(1.0)
        live0 = server.live_memory()
        rss0, anon0 = server.rss(), server.rss_anon()
        base = int(now_ms()) + 3_600_000
        sent = 0
        t0 = time.time()
        chunk = 10_000
        cut = False
        while sent < target:
            if time.time() - t0 > budget_s:
                cut = True
                break
            k = min(chunk, target - sent)
            items = [(base + random.randrange(3_600_000), sched_body(sent + i, 0), "") for i in range(k)]
            cl.schedule("w3", items)
            sent += k
        took = time.time() - t0
        time.sleep(3.0)  # let the broker settle (flushes, paging)
        samples, anon = [], []
        for _ in range(4):
            samples.append(server.rss())
            anon.append(server.rss_anon())
            time.sleep(0.5)
        rss1, anon1 = max(samples), max(anon)
        live1 = server.live_memory()
        extra: dict[str, Any] = {}
        for k, v in live1.items():
            if k in live0 and sent:
                extra.update({f"{k}_before": live0[k], f"{k}_after": v, f"{k}_per_msg": (v - live0[k]) / sent})
    finally:
        cl.close()
    return {**extra, "target": target, "pending": sent, "cut_short": cut, "send_s": took, "rss_before": rss0,
            "rss_after": rss1, "bytes_per_msg": (rss1 - rss0) / sent if sent else float("nan"),
            "anon_before": anon0, "anon_after": anon1,
            "anon_bytes_per_msg": (anon1 - anon0) / sent if sent else float("nan"),
            "enqueue_per_s": sent / took if took else float("nan")}


# --------------------------------------------------------------------------------------------------- W4
def w4(server: ServerBase, peer: str, quick: bool, budget_s: float) -> dict[str, Any]:
    """N pending delayed messages (the durable setting), SIGKILL the broker once every send is acknowledged,
    restart it at once; the consumer stays up and reconnects. Lost, duplicated, seconds until deliveries
    resume. Deliver times are spread over S seconds starting 0.5 s after the planned kill, so the first ones
    fall due while the broker is down."""
    n = 10_000 if quick else 100_000
    spread = 8.0 if quick else 20.0
    cl = client_of(peer, server.conn())
    try:
        cl.setup("w4", True)
        # the enqueue rate in this (durable) setting, to plan the kill: 2,000 far-future messages
        probe = 2_000
        far = int(now_ms()) + 7_200_000
        cl.setup("w4probe", True)
        t0 = time.time()
        cl.schedule("w4probe", [(far, sched_body(-1 - i, far), "") for i in range(probe)], durable=True)
        rate_hint = probe / (time.time() - t0)
        send_s = min(budget_s * 0.6, n / rate_hint * 1.3 + 2)
        t_kill_plan = now_ms() + send_s * 1000
        first_due = t_kill_plan + 500
        deliver = [int(first_due + random.random() * spread * 1000) for _ in range(n)]
        last_due = max(deliver)
        cons = Consumer(peer, server.conn(), "w4", n, last_due / 1000 + min(90.0, budget_s * 0.4), grace=3.0)
        ts = time.time()
        cl.schedule("w4", [(d, sched_body(i, d), "") for i, d in enumerate(deliver)], durable=True)
        sent_s = time.time() - ts
    finally:
        cl.close()
    wait = t_kill_plan / 1000 - time.time()
    if wait > 0:
        time.sleep(wait)
    t_kill = time.time()
    server.kill()
    server.start()
    t_ready = time.time()
    got = cons.result()
    before = [r for _, r, _ in got if r < t_kill * 1000]
    after = sorted(r for _, r, _ in got if r >= t_kill * 1000)
    uniq = {i for i, _, _ in got}
    return {"n": n, "send_s": sent_s, "enqueue_per_s": n / sent_s, "pending_at_kill": n - len(set(
        i for i, r, _ in got if r < t_kill * 1000)), "delivered_before_kill": len(before),
        "overdue_at_restart": sum(1 for d in deliver if d <= t_ready * 1000),
        "restart_s": t_ready - t_kill,
        "first_delivery_after_kill_s": (after[0] / 1000 - t_kill) if after else float("nan"),
        "lost": n - len(uniq), "duplicated": len(got) - len(uniq),
        "all_by_s": (after[-1] / 1000 - t_kill) if after and len(uniq) == n else float("nan")}


# --------------------------------------------------------------------------------------------------- W5
def w5(server: ServerBase, peer: str, quick: bool) -> dict[str, Any]:
    """One key, N messages with random delays (1 .. 10 s, distinct deliver times), sent in random order:
    delivered in deliver-time order?"""
    n = 500 if quick else 2_000
    hi = 5_000 if quick else 10_000
    cl = client_of(peer, server.conn())
    try:
        cl.setup("w5", True)
        base = int(now_ms()) + 1_000
        deliver = [base + x for x in random.sample(range(hi), n)]
        cons = Consumer(peer, server.conn(), "w5", n, base / 1000 + hi / 1000 + 20, ordered=True)
        cl.schedule("w5", [(d, sched_body(i, d, "order-key"), "order-key") for i, d in enumerate(deliver)])
        got = cons.result()
    finally:
        cl.close()
    seq = [d for _, _, d in got]
    inversions = sum(1 for a, b in zip(seq, seq[1:], strict=False) if b < a)
    # the largest step back in deliver time
    worst, hi_seen = 0.0, float("-inf")
    for d in seq:
        hi_seen = max(hi_seen, d)
        worst = max(worst, hi_seen - d)
    return {"n": n, "delivered": len({i for i, _, _ in got}), "inversions": inversions,
            "in_order": inversions == 0 and len(seq) > 0, "worst_step_back_ms": worst}

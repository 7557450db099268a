"""W1 and W2 through the Java load generator (bench/compare/jvm/loadgen: RocketMQ's official remoting client),
for the peers ``tidalmq_java`` and ``rocketmq_java``: the same brokers as ``tidalmq`` and ``rocketmq_p100``,
driven by the other side's client, so that neither broker is judged only through TidalMQ's.

Each phase is one JVM (tidalmq.bench.LoadGen): it connects, subscribes its consumer, says ``ready`` and waits
for a line on stdin; the broker's CPU is read then and again at the ``sent`` line (the last acknowledgement),
the harness's per-broker-core accounting (workloads.per_core). The figures have the Python workloads' names,
so the report puts both clients side by side; what differs: W2 here has no background mix (the due window
alone) and no burst figures.
"""

from __future__ import annotations

import functools
import json
import subprocess
import time
from pathlib import Path
from typing import Any

from bench.common import settled_cpu_s
from bench.compare import workloads
from bench.compare.base import ServerBase
from bench.compare.peers.jvm import fetch_lib, pinned

WINDOW = 256  # async sends in flight, as the Python peers' single sends
BATCH = 512  # W1's throughput phase: messages a batch request, as the Python peers'
BATCH_WINDOW = 16
HEAP = ["-Xms256m", "-Xmx512m"]
MAIN = "tidalmq.bench.LoadGen"
KAFKA_MAIN = "tidalmq.bench.KafkaLoad"


@functools.cache
def classpath() -> str:
    """The load generator's classpath, built into the reference cache once a run (a no-op when built)."""
    lib = fetch_lib("loadgen", "jvm-bench/loadgen")
    return f"{lib.parent / 'target' / 'loadgen-1.jar'}:{lib}/*"


def settings() -> dict[str, str]:
    return {"client": f"Java load generator (bench/compare/jvm/loadgen, rocketmq-client "
            f"{_client_version()}): W1 in batches of {BATCH} ({BATCH_WINDOW} in flight) and paced single async sends, "
            f"W2 single async timer sends (setDeliverTimeMs, {WINDOW} in flight), DefaultMQPushConsumer (pulls of 256, "
            f"listener batch 32) in the same JVM ({' '.join(HEAP)})"}


def _client_version() -> str:
    import re

    pom = (Path(__file__).parent / "jvm" / "loadgen" / "pom.xml").read_text()
    m = re.search(r"<rocketmq.client.version>([^<]+)<", pom)
    return m.group(1) if m else "?"


class Phase:
    """One LoadGen run: ``ready`` -> go -> ``sent`` -> ``done``, the broker's CPU read at go and at sent."""

    def __init__(self, server: ServerBase, main: str = MAIN, cp: str | None = None, **params: Any) -> None:
        self.server = server
        self.events: list[dict[str, Any]] = []
        self.c0 = 0.0  # the broker's CPU seconds at the go line
        args = [f"{k}={v}" for k, v in {**server.conn(), **params}.items()]
        self.proc = subprocess.Popen(["java", *HEAP, "-cp", cp or classpath(), main, *args], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)

    def _event(self, want: str, timeout: float) -> dict[str, Any]:
        assert self.proc.stdout is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                err = self.proc.stderr.read()[-2000:] if self.proc.stderr else ""
                raise RuntimeError(f"LoadGen exited ({self.proc.wait(10)}) before {want!r}: {err}")
            if not line.startswith("{"):
                continue
            ev = json.loads(line)
            self.events.append(ev)
            if ev.get("event") == "error":
                raise RuntimeError(f"LoadGen: {ev.get('error')}")
            if ev.get("event") == want:
                return ev
        raise TimeoutError(f"LoadGen: no {want!r} in {timeout:.0f} s")

    def run(self, timeout: float) -> dict[str, Any]:
        try:
            self._event("ready", 120)
            self.c0 = c0 = workloads.server_cpu_s(self.server)
            assert self.proc.stdin is not None
            self.proc.stdin.write("go\n")
            self.proc.stdin.flush()
            sent = self._event("sent", timeout)
            sent["broker_cpu_s"] = workloads.server_cpu_s(self.server) - c0
            done = self._event("done", timeout)
            self.proc.wait(30)
            return {**sent, **done}
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait(10)


def _setup(server: ServerBase, peer: str, *dests: str) -> None:
    cl = workloads.client_of(peer, server.conn())
    try:
        for d in dests:
            cl.setup(d, False)
    finally:
        cl.close()


def kafka_classpath() -> str:
    """KafkaLoad (compiled in the load generator's jar) with the Kafka peer's own client jars."""
    kafka_lib = fetch_lib("kafka", f"kafka-{pinned('kafka', 'kafka.version')}")
    return f"{classpath()}:{kafka_lib}/*"


def w1(server: ServerBase, peer: str, quick: bool) -> dict[str, Any]:
    """As workloads.w1: 1 KiB messages as fast as the client sends them (batches), then 1,000 msgs/s paced.
    Kafka's peer (``kafka_java``): its own Java client, which batches by itself (linger.ms at its default
    for the throughput, 0 for the paced latency), the same 8,192 messages in flight."""
    n = 5_000 if quick else 30_000
    paced_s = 2 if quick else 5
    _setup(server, peer, "jw1t", "jw1t2", "jw1l")
    kafka = peer.startswith("kafka")
    how: dict[str, Any] = ({"main": KAFKA_MAIN, "cp": kafka_classpath()} if kafka else {})
    # each phase warms the JVM's JIT up on its own path first (before the clock and the CPU reading start)
    batching = {"window": BATCH * BATCH_WINDOW} if kafka else {"batch": BATCH, "window": BATCH_WINDOW}
    failed_first = ""
    for topic in ("jw1t", "jw1t2"):
        r = Phase(server, topic=topic, phase="throughput", n=n, size=workloads.W1_BODY, **how, **batching,
                  warmup=n // 2, wait_s=60 if quick else 120).run(300)
        if not r["errors"]:
            break
        # sends that failed once on a loaded machine (seen once with RocketMQ's broker in a full run) get one
        # more attempt on a fresh topic, and the report says so with the first failure's cause
        why = f"{r['errors']} sends failed, the first: {r.get('first_error', '?')}"
        if failed_first:
            raise RuntimeError(f"{failed_first}; again: {why}")
        failed_first = why
        print(f"[{time.strftime('%H:%M:%S')}] {peer} W1: {why}; running the throughput phase once more", flush=True)
    rate = n / r["send_s"]
    # busy answers (RocketMQ's flow control) are resent by the load generator, as a user's producer would
    out: dict[str, Any] = {"n": n, "received": r["received"], "produced_per_s": rate,
                           "consumed_per_s": r["received"] / max(1e-3, (r["last_recv_ms"] - r["t0_ms"]) / 1000),
                           "produce_broker_cpu_s": r["broker_cpu_s"], "busy_retries": r.get("busy_retries", 0),
                           "first_attempt_failed": failed_first}
    pc = workloads.per_core(rate, r["broker_cpu_s"], r["send_s"])
    out.update(produce_broker_cores=pc["cores"], produced_per_core=pc["per_core"])
    r = Phase(server, topic="jw1l", phase="paced", rate=1000, seconds=paced_s, size=workloads.W1_BODY,
              window=WINDOW, warmup=1000 * paced_s // 2, wait_s=60, **how,
              **({"linger_ms": 0} if kafka else {})).run(120)
    # a send refused as busy is resent after a pause (its latency counts from its first send); any other
    # error is missing at the consumer
    out.update(paced_busy_retries=r.get("busy_retries", 0), paced_rate=1000, paced_n=r["expected"], paced_received=r["received"], paced_send_errors=r["errors"],
               lat_p50_ms=r["p50_ms"], lat_p99_ms=r["p99_ms"])
    return out


def w2(server: ServerBase, peer: str, quick: bool, budget_s: float) -> dict[str, Any]:
    """As workloads.w2 without its background mix: the enqueue rate of timer messages due in 1 min .. 1 h,
    then lateness at 1,000 and 10,000 due/s over a window that starts once the sends are done."""
    # each phase starts a JVM and subscribes (tens of seconds on a loaded machine): twice the sending budget
    t_budget = time.time() + 2 * budget_s
    n = 20_000 if quick else 100_000  # a JVM needs more than the Python workload's 2,000 to say anything
    _setup(server, peer, "jw2enq", "jw2r1000", "jw2r10000")
    ph = Phase(server, topic="jw2enq", phase="timer-enqueue", n=n, size=workloads.SCHED_BODY, window=WINDOW,
               warmup=n // 4)
    r = ph.run(600)
    if r["errors"]:
        raise RuntimeError(f"{r['errors']} timer sends failed, the first: {r.get('first_error', '?')}")
    rate = n / r["send_s"]
    # per core as the Python W2 counts it: the CPU until the broker is idle again (the work left after the
    # last acknowledgement, such as filing into the timer wheel, included; the JVM's exit is in it too)
    c_settled, settle_s = settled_cpu_s(lambda: workloads.server_cpu_s(server))
    c_enq = c_settled - ph.c0
    out: dict[str, Any] = {"enqueue_per_s": rate, "enqueue_n": n, "enqueue_acked_cpu_s": r["broker_cpu_s"],
                           "enqueue_broker_cpu_s": c_enq, "enqueue_settle_s": settle_s,
                           "enqueue_broker_cores": r["broker_cpu_s"] / r["send_s"],
                           "enqueue_per_core": n / c_enq if c_enq > 0 else float("nan")}
    for due_rate, window in ((1_000, 3 if quick else 10), (10_000, 1 if quick else 5)):
        key = f"r{due_rate}"
        total = due_rate * window
        # the JVM's start and subscription come before the clock: the lead covers the sends alone
        lead_ms = int((total / rate * 1.5 + 3) * 1000)
        if time.time() + lead_ms / 1000 + window + 30 > t_budget:
            out[key] = {"skipped": f"would not fit the time budget (sending {total} at {rate:.0f}/s)"}
            continue
        r = Phase(server, topic=f"jw2r{due_rate}", phase="timer-late", rate=due_rate, seconds=window, lead_ms=lead_ms,
                  size=workloads.SCHED_BODY, window=WINDOW, wait_s=window + 10 + lead_ms / 1000).run(600)
        late = r["send_s"] * 1000 > lead_ms
        out[key] = {"due_rate": due_rate, "window_s": window, "sent": total, "send_s": r["send_s"],
                    "expected": total, "delivered": r["received"], "missing": total - r["received"],
                    "p50_ms": r["p50_ms"], "p99_ms": r["p99_ms"], "max_ms": r["max_ms"], "early": r["early"],
                    "duplicates": r["duplicates"], "sends_overran_window_start": late}
    return out


def enqueue_pending(server: ServerBase, topic: str, n: int, budget_s: float, lo_ms: int, hi_ms: int,
                    batch: int = 0) -> dict[str, Any]:
    """bench/pending_bench.py's enqueue through the Java client: N timer messages due ``lo_ms`` .. ``hi_ms``
    ahead, the rate of each tenth, cut at ``budget_s``. ``batch`` 0: single async sends, WINDOW in flight;
    else batches of ``batch``, BATCH_WINDOW in flight (for a broker that takes timer messages in batches)."""
    window = BATCH_WINDOW if batch > 0 else WINDOW
    ph = Phase(server, topic=topic, phase="timer-enqueue", n=n, size=workloads.SCHED_BODY, window=window,
               batch=batch, min_delay_ms=lo_ms, max_delay_ms=hi_ms, budget_s=budget_s)
    r = ph.run(budget_s + 600)
    marks = [(0, r["t0_ms"])] + [(e["sent"], e["at_ms"]) for e in ph.events if e.get("event") == "tenth"]
    marks.append((r["count"], r["t0_ms"] + r["send_s"] * 1000))
    rates = [(b[0] - a[0]) / max(1e-6, (b[1] - a[1]) / 1000) for a, b in zip(marks, marks[1:], strict=False)
             if b[0] > a[0]]
    sent = r["count"]
    # the first tenth includes the JVM's JIT warming up (no warm-up here: every message sent is pending)
    return {"target": n, "pending": sent, "cut_short": sent + r["errors"] < n, "enqueue_s": r["send_s"],
            "enqueue_per_s": sent / r["send_s"] if r["send_s"] else float("nan"), "enqueue_per_s_by_tenth": rates,
            "send_errors": r["errors"], "first_send_error": r.get("first_error", ""),
            "client": f"java, batches of {batch}" if batch > 0 else "java, single sends"}

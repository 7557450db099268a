"""bench/RESULTS.md and its plots from one run's results (see run.py)."""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

from bench.common import machine
from bench.compare import report_pending

ORDER = ("tidalmq", "tidalmq_java", "rocketmq", "rocketmq_p100", "rocketmq_java", "kafka", "kafka_java", "redis",
         "rabbitmq", "activemq", "beanstalkd", "nats")
TITLE = {"tidalmq": "TidalMQ", "tidalmq_java": "TidalMQ (Java client)", "rocketmq": "Apache RocketMQ 5 (timer 1000 ms)",
         "rocketmq_p100": "Apache RocketMQ 5 (timer 100 ms)",
         "rocketmq_java": "Apache RocketMQ 5 (timer 100 ms, Java client)", "kafka": "Apache Kafka (KRaft)",
         "kafka_java": "Apache Kafka (KRaft, Java client)",
         "redis": "Redis (ZSET + Streams)", "rabbitmq": "RabbitMQ (TTL + DLX)",
         "activemq": "ActiveMQ (scheduler)", "beanstalkd": "beanstalkd", "nats": "NATS JetStream"}

NOTES = """\
- **Noise.** A 2-core VM, at times shared with other engineers' test runs (the load average above says how
  busy it was; the harness's own processes count in it); the brokers, the load generator and the consumer
  share those 2 cores. Differences under ~20 % are not meaningful; orders of magnitude are.
- **The clients are Python** (redis-py, pika, stomp.py, greenstalk, nats-py, aiokafka and our own `tidalmq.client`,
  which drives Apache RocketMQ too: both speak remoting),
  one producer in the harness process, one consumer in its own process; except the "Java client" rows: the
  same TidalMQ and RocketMQ brokers driven by RocketMQ's official Java client (rocketmq-client, the Java load
  generator bench/compare/jvm/loadgen, producer and push consumer in one JVM), so that neither broker is
  judged only through the other's client, and Kafka through its own Java client (kafka-clients), which
  aiokafka's rate does not bound. Its W2 has no background mix (the due window alone, no burst
  figures), and its JIT is warmed up on each phase's own path before the clock starts. At these rates most peers are
  *client-bound*: the msgs/s say what a Python application gets from each broker, not the broker's ceiling.
  Each client pipelines or keeps requests in flight where it can (Redis pipelines of 500, RabbitMQ 256
  unconfirmed publishes, ActiveMQ asynchronous SENDs with periodic receipts, NATS and TidalMQ 256 awaiting
  acks); greenstalk cannot (one round trip per put / reserve / delete).
- **Lateness** is measured at the consumer: receive time minus the requested deliver time, wall clock of the
  same machine. It includes the consumer's own pull / poll / long-poll path.
- **RabbitMQ** has no native scheduler in Debian's package (the delayed-message-exchange plugin is separate).
  Its documented scheme, per-message TTL + dead-letter exchange, expires messages only at the *head* of the
  queue: with mixed delays a 1-hour message holds back every shorter one behind it. The W2 "missing" and W5
  figures show exactly that; it is the scheme, not a tuning problem (one queue per fixed delay is the usual
  workaround, which does not do arbitrary delays).
- **beanstalkd** delays are whole seconds: a deliver time is rounded up to the next second, so lateness is up
  to 1 s by construction, and jobs that become ready in the same second come out in priority/id order, not
  deliver-time order (W5).
- **NATS JetStream** (2.9.10 from Debian) has no delayed or scheduled delivery, so only W1 applies; W2..W5
  say so rather than emulate one (`nak(delay)` is a redelivery back-off, not a schedule).
- **Redis** is a scheme, not a broker feature: the sorted set, the mover (a separate Python process polling
  every 10 ms, moving due members with one Lua script) and the stream. Its lateness is bounded below by the
  poll interval; its W3 memory is Redis's own (the mover holds nothing).
- **W3 memory** is the RSS of the process holding the messages and of the processes under it (TidalMQ's
  schedule process holds the timer's index; runs before 2026-12-02 counted the broker process alone),
  before and after the enqueue (after 3 s of settling). RSS includes mapped store files: TidalMQ maps its CommitLog, so its RSS grows with the page
  cache it touched; `RssAnon` (anonymous memory only) is given beside it. A JVM's RSS is mostly the heap it has
  touched (ActiveMQ runs with Debian's fixed 512 MiB heap): the live heap after a full GC (`jcmd GC.run`) is
  given beside it. "cut short" means the enqueue hit the workload's time limit before 1 M; the per-message
  figure is then over what was enqueued.
- **W4** runs each peer in its most durable documented setting (listed below); the broker is SIGKILLed only
  after every send was acknowledged, then restarted at once; the consumer process stays up and reconnects.
  "first delivery" is the first message the consumer receives after the kill, in seconds from the kill: it
  includes the restart and the client's reconnect (TidalMQ's push consumer, like RocketMQ's, waits 3 s before
  retrying a pull that failed). Messages are due from 0.5 s after the kill, so 0.5 s is the best possible figure
  and a broker that restarts slower finds some overdue. Duplicates are deliveries of an id already received
  (at-least-once redelivery of messages whose ack the crash lost).
- **"Due during the enqueue burst"** (W2) is where TidalMQ is weakest. A message sent after its deliver time
  (the burst's sends take about a second, and the shortest delays are 1 s from the first send) cannot be
  delivered before it arrives, so some of the figure follows how fast the client's sends go (the column "sent
  after due" in the table; "from send", the lateness counted from each message's send, is what the
  broker added). TidalMQ's schedule process indexes the burst's timer messages in CommitLog order
  (docs/multicore.md), so one falling due soon after its send waits until the messages sent before it are
  indexed; a message whose deliver time has passed when it arrives is stored at once in its topic
  (docs/scheduled-delivery.md). Runs before 2026-11-27 10:00 drew the delays before the consumer's process
  had started (~0.25 s), so more messages were sent after their deliver time (hundreds, not a handful) and
  the burst p99 was mostly that.
- **ActiveMQ**'s scheduler, with its default synchronous journal, did not keep up with the due rates here: its
  lateness grows through the window at 10,000/s, and after the W4 restart it took tens of seconds to drain.

"""

METHOD = """\
- **W1 messaging**: 1 KiB messages. Throughput: one producer sends N as fast as its client allows while one
  consumer receives; produced msgs/s = N / time until the last send was acknowledged, consumed msgs/s = N /
  time from the first send to the last receive. Latency: a separate run paced at 1,000 msgs/s; end-to-end
  latency = receive time - send time (p50 / p99).
- **Per core used** (W1 produce, W2 enqueue): the broker's CPU seconds (every thread of its process and of the
  processes under it, such as TidalMQ's schedule process, to the nanosecond from the kernel's per-thread
  accounting) over the phase divided by the phase's wall seconds = the cores it used; messages per second per
  core = the messages divided by those CPU seconds. For W2 the CPU is counted until the broker is idle again
  (under 0.05 cores over 0.2 s), so that work left after the last acknowledgement counts (TidalMQ's schedule
  process files timer messages into its wheel after they are acknowledged). The client's CPU is not in it.
  (Runs before 2026-11-27 counted in 10 ms ticks and missed live child processes.)
- **W2 scheduled**: enqueue rate = 100,000 delayed messages (delays 1 min .. 1 h, 100-byte bodies) sent as fast
  as the client allows. Lateness at R = 1,000 and 10,000 messages due per second: for a window of W seconds
  (10 s and 5 s) starting at T0, R×W messages are due uniformly over [T0, T0+W] and R×W/2 background
  messages get delays log-uniform between 1 s and 1 h from the start of the sends (the consumer is up before
  they are drawn); all are sent in random order before
  T0 (T0 is planned from the measured enqueue rate, with 30 % to spare). So while the window is delivered the
  broker holds a mix of delays from 1 s to 1 h, and the due rate in the window is R (plus the few background
  messages that fall due in it; a uniform 1 s .. 1 h mix at R/s would need R × 3,600 messages in flight, which
  no 30-minute run on this machine can enqueue). The window's messages themselves were sent with delays of a
  few seconds to ~T0+W. Every message due in [T0, T0+W] is measured; those not received within the grace
  period after T0+W (10 s) are "missing". Separately, the background messages with short delays fell due
  *during* the enqueue burst (before T0): their lateness is reported as "due during the enqueue burst" (a
  broker that delivers and ingests on the same resources shows it there). Early = received before its deliver
  time, over both sets.
- **W3 memory**: N pending delayed messages (due in 1 h .. 2 h, 100-byte bodies), broker RSS before and after;
  per pending message = ΔRSS / N.
- **W4 crash**: 100,000 delayed messages, deliver times spread over 20 s starting 0.5 s after the planned kill
  (planned from a 2,000-message probe of the enqueue rate in this setting); SIGKILL, immediate restart; lost =
  ids never received (within 90 s of the last deliver time), duplicated = receives beyond the first.
- **W5 ordering**: 2,000 messages of one key (one queue / stream / tube / queue) with distinct deliver times
  random in 1 .. 10 s, sent in random order; in order = the consumer receives them in deliver-time order
  (inversions = adjacent pairs out of order; worst step back = how far behind the latest deliver time seen a
  message came).
"""


def fmt(v: Any, digits: int = 0) -> str:
    if v is None:
        return "—"
    if isinstance(v, float):
        if math.isnan(v):
            return "—"
        if digits == 0 and abs(v) >= 100:
            return f"{v:,.0f}"
        return f"{v:,.{digits}f}" if digits else f"{v:,.1f}"
    if isinstance(v, int):
        return f"{v:,}"
    return str(v)


def mib(v: Any) -> str:
    return f"{v / 2**20:,.0f} MiB" if isinstance(v, int | float) else "—"


def cell_status(p: dict[str, Any], w: str) -> str | None:
    """The text for a cell the peer did not measure, or None."""
    if "unavailable" in p:
        return "not available from Debian here" if "not installed" in p["unavailable"] else p["unavailable"]
    if "error" in p and not p.get("workloads"):
        return f"error: {p['error']}"
    r = p.get("workloads", {}).get(w)
    if r is None:
        return "not run"
    if "unsupported" in r:
        return f"cannot: {r['unsupported']}"
    if "skipped" in r:
        return f"skipped: {r['skipped']}"
    if "error" in r:
        return f"error: {r['error'][:160]}"
    return None


def table(header: list[str], rows: list[list[str]]) -> str:
    out = ["| " + " | ".join(header) + " |", "| " + " | ".join("---" for _ in header) + " |"]
    for r in rows:
        if len(r) < len(header):  # a status spanning the row
            r = r + [""] * (len(header) - len(r))
        out.append("| " + " | ".join(x.replace("|", "\\|") for x in r) + " |")
    return "\n".join(out)


def peers_of(results: dict[str, Any]) -> list[str]:
    ps = results["peers"]
    return [p for p in ORDER if p in ps] + [p for p in ps if p not in ORDER]


def w1_rows(results: dict[str, Any]) -> list[list[str]]:
    rows = []
    for name in peers_of(results):
        p = results["peers"][name]
        st = cell_status(p, "W1")
        if st:
            rows.append([TITLE.get(name, name), st])
            continue
        r = p["workloads"]["W1"]
        rows.append([TITLE.get(name, name), fmt(r["produced_per_s"]), cores_cell(r, "produce_broker_cores",
                     "produced_per_core"), fmt(r["consumed_per_s"]),
                     f"{fmt(r['lat_p50_ms'], 2)} / {fmt(r['lat_p99_ms'], 2)}",
                     f"{r['received']:,}/{r['n']:,} + {r['paced_received']:,}/{r['paced_n']:,}"
                     + (f" ({r['paced_send_errors']:,} sends refused)" if r.get("paced_send_errors") else "")
                     + (f" (a second attempt: in the first {r['first_attempt_failed']})"
                        if r.get("first_attempt_failed") else "")])
    return rows


def cores_cell(r: dict[str, Any], cores_key: str, per_core_key: str) -> str:
    """The broker's cores used over a phase (CPU s / wall s) and the rate per core used; runs made before
    these figures were recorded have none."""
    if cores_key not in r:
        return "—"
    return f"{fmt(r[cores_key], 2)} / {fmt(r[per_core_key])}"


def w2_rows(results: dict[str, Any]) -> list[list[str]]:
    rows = []
    for name in peers_of(results):
        p = results["peers"][name]
        st = cell_status(p, "W2")
        if st:
            rows.append([TITLE.get(name, name), st])
            continue
        r = p["workloads"]["W2"]
        for key in ("r1000", "r10000"):
            c = r.get(key) or {"skipped": "not run"}
            head = [TITLE.get(name, name), f"{int(key[1:]):,}"]
            if "skipped" in c:
                rows.append(head + [f"skipped: {c['skipped']}"])
                continue
            miss = f"{c['missing']:,} of {c['expected']:,}"
            if c["missing"]:
                miss = f"**{miss}**"
            if "burst_delivered" not in c:  # the Java load generator's W2 has no background mix
                burst = "—"
            else:
                burst = f"{c['burst_delivered']:,}: {fmt(c['burst_p99_ms'])} / {fmt(c['burst_max_ms'])}"
            if c.get("burst_missing"):
                burst += f" (**{c['burst_missing']:,} missing**)"
            if c.get("burst_sent_after_due"):  # figures of runs before it was recorded lack it
                burst += (f"; {c['burst_sent_after_due']:,} sent after due, from send p99 "
                          f"{fmt(c['burst_from_send_p99_ms'])}")
            rows.append(head + [f"{fmt(c['p50_ms'])} / {fmt(c['p99_ms'])} / {fmt(c['max_ms'])}", str(c["early"]),
                                miss, burst, f"{c['window_s']} s, {c['sent']:,} sent in {c['send_s']:.1f} s",
                                fmt(r.get("enqueue_per_s")) if key == "r1000" else "",
                                cores_cell(r, "enqueue_broker_cores", "enqueue_per_core") if key == "r1000" else ""])
    return rows


def w3_rows(results: dict[str, Any]) -> list[list[str]]:
    rows = []
    for name in peers_of(results):
        p = results["peers"][name]
        st = cell_status(p, "W3")
        if st:
            rows.append([TITLE.get(name, name), st])
            continue
        r = p["workloads"]["W3"]
        pend = f"{r['pending']:,}"
        if r["cut_short"]:
            pend += f" (**cut short** at the {r['send_s']:.0f} s limit; target {r['target']:,})"
        extra = ""
        if "jvm_heap_used_after_gc_per_msg" in r:
            extra = (f"; JVM live heap after GC {mib(r['jvm_heap_used_after_gc_before'])} → "
                     f"{mib(r['jvm_heap_used_after_gc_after'])} = {fmt(r['jvm_heap_used_after_gc_per_msg'])} B/msg")
        rows.append([TITLE.get(name, name), pend, f"{mib(r['rss_before'])} → {mib(r['rss_after'])}",
                     f"**{fmt(r['bytes_per_msg'])} B**", f"{fmt(r['anon_bytes_per_msg'])} B{extra}",
                     fmt(r["enqueue_per_s"])])
    return rows


def w4_rows(results: dict[str, Any]) -> list[list[str]]:
    rows = []
    for name in peers_of(results):
        p = results["peers"][name]
        st = cell_status(p, "W4")
        if st:
            rows.append([TITLE.get(name, name), st])
            continue
        r = p["workloads"]["W4"]
        rows.append([TITLE.get(name, name), f"{r['pending_at_kill']:,} of {r['n']:,}", f"**{r['lost']:,}**",
                     f"**{r['duplicated']:,}**", f"{r['restart_s']:.2f}", f"{fmt(r['first_delivery_after_kill_s'], 2)}",
                     f"{r['overdue_at_restart']:,}", fmt(r["all_by_s"], 1), fmt(r["enqueue_per_s"])])
    return rows


def w5_rows(results: dict[str, Any]) -> list[list[str]]:
    rows = []
    for name in peers_of(results):
        p = results["peers"][name]
        st = cell_status(p, "W5")
        if st:
            rows.append([TITLE.get(name, name), st])
            continue
        r = p["workloads"]["W5"]
        rows.append([TITLE.get(name, name), "**yes**" if r["in_order"] else "**no**",
                     f"{r['inversions']:,}", fmt(r["worst_step_back_ms"]), f"{r['delivered']:,} of {r['n']:,}"])
    return rows


def summary_rows(results: dict[str, Any]) -> list[list[str]]:
    rows = []
    for name in peers_of(results):
        p = results["peers"][name]
        ws = p.get("workloads", {})

        def get(w: str, f: Any, p: dict[str, Any] = p, ws: dict[str, Any] = ws) -> str:
            st = cell_status(p, w)
            if st:
                return "n/a" if st.startswith("cannot") else ("not in Debian" if "Debian" in st else st[:40])
            try:
                return f(ws[w])
            except (KeyError, TypeError):
                return "—"

        rows.append([
            TITLE.get(name, name),
            get("W1", lambda r: f"{fmt(r['produced_per_s'])} / {fmt(r['consumed_per_s'])}"),
            get("W1", lambda r: f"{fmt(r['lat_p99_ms'], 1)}"),
            get("W2", lambda r: fmt(r["enqueue_per_s"])),
            get("W2", lambda r: "skipped" if "skipped" in r["r1000"] else (
                f"{fmt(r['r1000']['p99_ms'])}" + (f" ({r['r1000']['missing']:,} missing)" if r["r1000"]["missing"] else ""))),
            get("W2", lambda r: "skipped" if "skipped" in r["r10000"] else (
                f"{fmt(r['r10000']['p99_ms'])}" + (f" ({r['r10000']['missing']:,} missing)" if r["r10000"]["missing"] else ""))),
            get("W2", lambda r: str(sum(r[k].get("early", 0) for k in ("r1000", "r10000") if k in r))),
            get("W3", lambda r: f"{fmt(r['bytes_per_msg'])}" + (" (cut short)" if r["cut_short"] else "")),
            get("W4", lambda r: f"{r['lost']:,} / {r['duplicated']:,} / {fmt(r['first_delivery_after_kill_s'], 1)}"),
            get("W5", lambda r: "yes" if r["in_order"] else f"no ({r['inversions']:,} inversions)"),
        ])
    return rows


def settings_md(results: dict[str, Any]) -> str:
    out = []
    for name in peers_of(results):
        p = results["peers"][name]
        out.append(f"**{TITLE.get(name, name)}** — {p.get('version', p.get('unavailable', '?'))}")
        s, d = p.get("settings") or {}, p.get("settings_durable") or {}
        for k, v in s.items():
            line = f"- `{k}`: {v}"
            if d.get(k) != v and k in d:
                line += f" — **W4 (durable):** {d[k]}"
            out.append(line)
        for k, v in d.items():
            if k not in s:
                out.append(f"- `{k}` (W4): {v}")
        out.append("")
    return "\n".join(out)


def plot(results: dict[str, Any], out: Path) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    made = []
    colours = {n: f"C{i}" for i, n in enumerate(ORDER)}
    names = [n for n in peers_of(results) if not cell_status(results["peers"][n], "W1")]
    if names:
        fig, ax = plt.subplots(1, 2, figsize=(12, 4.2))
        x = range(len(names))
        w1 = [results["peers"][n]["workloads"]["W1"] for n in names]
        ax[0].bar([i - 0.2 for i in x], [r["produced_per_s"] for r in w1], 0.4, label="produced")
        ax[0].bar([i + 0.2 for i in x], [r["consumed_per_s"] for r in w1], 0.4, label="consumed")
        ax[0].set_title("W1: 1 KiB messages, msgs/s")
        ax[1].bar([i - 0.2 for i in x], [r["lat_p50_ms"] for r in w1], 0.4, label="p50")
        ax[1].bar([i + 0.2 for i in x], [r["lat_p99_ms"] for r in w1], 0.4, label="p99")
        ax[1].set_yscale("log")
        ax[1].set_title("W1: end-to-end latency at 1,000 msgs/s (ms, log)")
        for a in ax:
            a.set_xticks(list(x), [TITLE.get(n, n).split(" (")[0] for n in names], rotation=20)
            a.legend()
            a.grid(alpha=0.3, axis="y")
        fig.tight_layout()
        p = out.with_name(out.stem + "-w1.png")
        fig.savefig(p, dpi=100)
        plt.close(fig)
        made.append(p.name)
    series = {n: results["peers"][n]["workloads"]["W2"].get("series", {}) for n in peers_of(results)
              if not cell_status(results["peers"][n], "W2")}
    if any(series.values()):
        fig, ax = plt.subplots(1, 2, figsize=(12, 4.5))
        for i, (key, label) in enumerate((("r1000", "1,000 due/s"), ("r10000", "10,000 due/s"))):
            for n, s in series.items():
                lat = sorted(x for _, x in s.get(key, []))
                if not lat:
                    continue
                r = results["peers"][n]["workloads"]["W2"][key]
                total = max(1, r["expected"])
                ax[i].plot([max(x, 0.1) for x in lat], [(k + 1) / total for k in range(len(lat))],
                           color=colours.get(n), label=f"{TITLE.get(n, n).split(' (')[0]} ({len(lat):,}/{total:,})")
            ax[i].set_xscale("log")
            ax[i].set_ylim(0, 1.02)
            ax[i].set_xlabel("lateness (ms, log; received - deliver time)")
            ax[i].set_ylabel("fraction of the messages due")
            ax[i].set_title(f"W2: lateness CDF at {label}")
            ax[i].grid(alpha=0.3)
            ax[i].legend(fontsize=8)
        fig.tight_layout()
        p = out.with_name(out.stem + "-w2.png")
        fig.savefig(p, dpi=100)
        plt.close(fig)
        made.append(p.name)
    names = [n for n in peers_of(results) if not cell_status(results["peers"][n], "W3")]
    if names:
        fig, ax = plt.subplots(figsize=(8, 4))
        w3 = [results["peers"][n]["workloads"]["W3"] for n in names]
        x = range(len(names))
        ax.bar([i - 0.2 for i in x], [r["bytes_per_msg"] for r in w3], 0.4, label="RSS / pending msg")
        ax.bar([i + 0.2 for i in x], [r.get("jvm_heap_used_after_gc_per_msg", r["anon_bytes_per_msg"]) for r in w3],
               0.4, label="anonymous RSS (JVM: live heap) / msg")
        ax.set_xticks(list(x), [TITLE.get(n, n).split(" (")[0] + (" *" if r["cut_short"] else "")
                                for n, r in zip(names, w3, strict=True)], rotation=20)
        ax.set_ylabel("bytes per pending message")
        ax.set_title("W3: memory per pending delayed message (* = cut short)")
        ax.legend()
        ax.grid(alpha=0.3, axis="y")
        fig.tight_layout()
        p = out.with_name(out.stem + "-w3.png")
        fig.savefig(p, dpi=100)
        plt.close(fig)
        made.append(p.name)
    return made


def write(results: dict[str, Any], out: Path, raw: Path) -> None:
    m = machine()
    try:
        pngs = plot(results, out)
    except Exception as e:  # noqa: BLE001
        pngs = []
        print(f"plots failed: {e}")
    load = results.get("loadavg_end") or os.getloadavg()  # runs before 2026-11-27 evening did not keep it
    mode = "--quick (small counts: a dry run, not the figures to quote)" if results["quick"] else "full"
    try:
        raw_s = str(raw.relative_to(out.parent.parent))
    except ValueError:
        raw_s = str(raw)
    lines = [
        "# TidalMQ side by side with the brokers used for delayed messages",
        "",
        f"Written by `bash bench/compare/run.sh` ({mode}), {results['started']}, in "
        f"{results['elapsed_s'] / 60:.1f} min; raw figures: `{raw_s}`. Peers: {', '.join(results['peers'])}; "
        f"workloads: {', '.join(results['workloads'])}. Every server ran on 127.0.0.1 of this machine, started "
        "by the harness with its config and data in a temp dir, in this same run.",
        "",
        f"Machine: {m['cpu']}, {m['cores']} cores, {m['mem_mib']:,} MiB, {m['platform']}, Python {m['python']}; "
        f"load average at the end {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f} (this run's own processes included; see Notes, Noise).",
        "",
        "## Summary",
        "",
        table(["peer", "W1 msgs/s prod / cons", "W1 p99 ms", "W2 enqueue /s", "W2 p99 late ms @1k/s (window)",
               "W2 p99 late ms @10k/s (window)", "W2 early", "W3 B / pending msg (RSS)", "W4 lost / dup / s to resume",
               "W5 in order"], summary_rows(results)),
        "",
        "## W1 messaging (1 KiB, one producer, one consumer)",
        "",
        table(["peer", "produced msgs/s", "broker cores used / produced msgs/s per core", "consumed msgs/s",
               "latency p50 / p99 ms (at 1,000 msgs/s)",
               "received (throughput + latency runs)"], w1_rows(results)),
        "",
        "## W2 scheduled delivery (delays mixed 1 s .. 1 h)",
        "",
        table(["peer", "due/s", "lateness p50 / p99 / max ms (window)", "early", "missing (window)",
               "due during the enqueue burst: n: p99 / max ms; sent after due, from send p99 ms", "window, sent", "enqueue msgs/s",
               "broker cores used / enqueued msgs/s per core"],
              w2_rows(results)),
        "",
        "## W3 memory with 1 M pending delayed messages",
        "",
        table(["peer", "pending", "RSS before → after", "RSS per pending msg", "anonymous RSS per msg",
               "enqueue msgs/s"], w3_rows(results)),
        "",
        "## W4 crash: SIGKILL with 100,000 pending, restart (most durable setting)",
        "",
        table(["peer", "pending at kill", "lost", "duplicated", "restart s", "first delivery s after kill",
               "overdue at restart", "all delivered s after kill", "enqueue msgs/s (durable)"], w4_rows(results)),
        "",
        "## W5 ordering: one key, random delays",
        "",
        table(["peer", "delivered in deliver-time order", "inversions", "worst step back ms", "delivered"],
              w5_rows(results)),
        "",
    ]
    if results.get("pending"):
        lines += ["## W6 pending scale: N scheduled messages due 7..30 days ahead", "",
                  table(report_pending.HEADER, report_pending.rows(results["pending"])), "",
                  f"W6 took {results.get('pending_elapsed_s', 0) / 60:.1f} min.", ""]
    for p in pngs:
        lines += [f"![{p}]({p})", ""]
    lines += ["## How each workload is measured", "", METHOD + report_pending.METHOD, "## Notes", "", NOTES,
              "## Versions and settings", "",
              "Each peer as its documentation recommends for the use; W4 in its most durable documented setting "
              "(marked). Python clients pinned in `pyproject.toml` (`compare` extra); servers from Debian "
              "(`bench/compare/install.sh`).", "", settings_md(results),
              "## Rerun", "",
              "```bash",
              "bash bench/compare/run.sh                      # install (apt + pip + jars) and run everything (~30-75 min)",
              "bash bench/compare/run.sh --with-1e8           # and W6 at 10^8 pending (~56 GiB free disk, +~15-45 min)",
              "bash bench/compare/run.sh --no-install --quick # a dry run with small counts (~12 min)",
              ".venv/bin/python -m bench.compare --peer redis --workload W2   # one peer / one workload",
              "```", "",
              "A `--quick` run writes `bench/out/RESULTS-quick.md`, a run limited to some peers or workloads "
              "`bench/out/RESULTS-partial.md` (and their plots) "
              "unless `--out` says otherwise, so bench/RESULTS.md always holds a full run. Each workload's sending "
              "is bounded in time (W2 150 s, W3 160 s, W4 150 s per peer; a cut is reported as such). "
              "`--report-from bench/out/compare-full-<time>.json` re-writes the report from a run's saved figures.",
              ""]
    out.write_text("\n".join(lines))

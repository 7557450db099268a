"""A subprocess that drives the official ``rocketmq==0.4.4`` client (C++ core) for the compat tests.

The C++ client is multithreaded and may hang on shutdown or take the interpreter down with it, so it
never runs inside pytest: the test process talks to this agent over its stdin/stdout with JSON lines.

    stdin   {"id": 1, "op": "producer_start", ...}        one command per line
    stdout  R {"id": 1, "ok": true, "result": ...}         the reply to a command
            E {"ev": "msg", "cid": "c1", ...}              events (received messages, streamed sends)

Run as ``python -m tests.compat.agent [lifetime_seconds]`` from the repository root. The agent exits by
itself when its stdin closes or its lifetime runs out, so a crashed test leaves nothing behind.
"""

from __future__ import annotations

import base64
import ctypes
import json
import os
import sys
import threading
import time
import traceback
from typing import Any

from rocketmq.client import Message, Producer, PullConsumer, PushConsumer, RecvMessage, ffi_check
from rocketmq.ffi import MessageModel, dll

from tests.compat.bodies import body_from_spec, digest

dll.SetByteMessageBody.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int]
dll.SetProducerCompressMsgBodyOverHowmuch.argtypes = [ctypes.c_void_p, ctypes.c_int]
dll.SetProducerCompressMsgBodyOverHowmuch.restype = ctypes.c_int

_out_lock = threading.Lock()
SMALL_BODY = 1024  # bodies up to this size are echoed back in full (base64)


def emit(kind: str, obj: dict[str, Any]) -> None:
    line = f"{kind} {json.dumps(obj, separators=(',', ':'))}\n"
    with _out_lock:
        sys.stdout.write(line)
        sys.stdout.flush()


def _text(v: bytes | str | None) -> str | None:
    if v is None:
        return None
    return v.decode("utf-8", "replace") if isinstance(v, bytes) else v


def build_message(spec: dict[str, Any]) -> tuple[Message, bytes]:
    msg = Message(spec["topic"])
    if spec.get("tags") is not None:
        msg.set_tags(spec["tags"])
    if spec.get("keys") is not None:
        msg.set_keys(spec["keys"])
    for k, v in (spec.get("props") or {}).items():
        msg.set_property(k, v)
    body = body_from_spec(spec.get("body") or {"text": ""})
    # SetByteMessageBody takes an explicit length; the wrapper's set_body goes through strlen().
    rc = dll.SetByteMessageBody(msg._handle, body, len(body))
    if rc != 0:
        raise RuntimeError(f"SetByteMessageBody failed: {rc}")
    return msg, body


def describe(m: Any, cid: str, props: list[str]) -> dict[str, Any]:
    body = m.body or b""
    d: dict[str, Any] = {
        "ev": "msg",
        "cid": cid,
        "topic": m.topic,
        "tags": _text(m.tags),
        "keys": _text(m.keys),
        "id": m.id,
        "queue_id": m.queue_id,
        "queue_offset": m.queue_offset,
        "commit_log_offset": m.commit_log_offset,
        "reconsume_times": m.reconsume_times,
        "store_timestamp": m.store_timestamp,
        "born_timestamp": m.born_timestamp,
        "body_len": len(body),
        "body_sha": digest(body),
        "uniq": _text(m.get_property("UNIQ_KEY")),
        "props": {p: _text(m.get_property(p)) for p in props},
        "t": time.time(),
    }
    if len(body) <= SMALL_BODY:
        d["body_b64"] = base64.b64encode(body).decode()
    return d


def subscribe_with_status(pc: PushConsumer, topic: str, callback: Any, expression: str) -> None:
    """Like ``PushConsumer.subscribe``, but a raising listener answers RECONSUME_LATER to the C++ core.

    The wrapper re-raises the listener's exception inside the ctypes callback, so ctypes returns 0
    (CONSUME_SUCCESS) and an orderly consumer skips the message instead of retrying it locally.
    """

    def _on_message(consumer: Any, cmsg: Any) -> int:
        try:
            callback(RecvMessage(cmsg))
        except Exception:
            return 1  # RECONSUME_LATER
        return 0  # CONSUME_SUCCESS

    ffi_check(dll.Subscribe(pc._handle, topic.encode(), expression.encode()))
    pc._register_callback(_on_message)


def result_dict(r: Any) -> dict[str, Any]:
    return {"status": r.status.name, "msg_id": r.msg_id, "offset": r.offset}


def run_with_timeout(fn: Any, timeout: float) -> bool:
    """Run ``fn`` in a daemon thread; False when it did not return in time (a hung client shutdown)."""
    t = threading.Thread(target=fn, daemon=True)
    t.start()
    t.join(timeout)
    return not t.is_alive()


class Agent:
    def __init__(self) -> None:
        self.producer: Producer | None = None
        self.consumers: dict[str, PushConsumer] = {}
        self.streams: list[threading.Thread] = []
        self.stream_stop = threading.Event()
        self.stream_counts = {"ok": 0, "failed": 0}
        # Client objects are never released: the wrapper's __del__ shuts down and destroys the C++
        # object again, which can hang; the process leaves through os._exit instead.
        self.graveyard: list[Any] = []

    # producer ---------------------------------------------------------------------------------
    def op_producer_start(self, c: dict[str, Any]) -> Any:
        p = Producer(c["group"], timeout=c.get("timeout_ms", 3000))
        if c.get("compress_over") is not None:
            dll.SetProducerCompressMsgBodyOverHowmuch(p._handle, int(c["compress_over"]))
        if c.get("max_message_size") is not None:
            p.set_max_message_size(int(c["max_message_size"]))
        if c.get("namesrv_domain"):  # the NameServer address server's URL, asked instead of an address
            p.set_namesrv_domain(c["namesrv_domain"])
        else:
            p.set_namesrv_addr(c["namesrv"])
        if c.get("credentials"):  # ACL: access key, secret key, channel
            p.set_session_credentials(*c["credentials"])
        self.graveyard.append(p)
        p.start()
        self.producer = p
        return "started"

    def op_send(self, c: dict[str, Any]) -> Any:
        p = self.producer
        assert p is not None, "producer_start first"
        mode = c["mode"]
        specs = c["messages"]
        if mode == "batch":
            built = [build_message(s) for s in specs]
            return result_dict(p.send_batch([m for m, _ in built]))
        if mode == "async":
            return self._send_async(p, specs, c.get("timeout", 30.0))
        out: list[Any] = []
        for s in specs:
            msg, _ = build_message(s)
            try:
                if mode == "sync":
                    out.append(result_dict(p.send_sync(msg)))
                elif mode == "orderly":
                    out.append(result_dict(p.send_orderly(msg, int(s["arg"]))))
                elif mode == "oneway":
                    p.send_oneway(msg)
                    out.append({"status": "ONEWAY"})
                else:
                    raise ValueError(f"unknown send mode {mode}")
            except Exception as e:  # the client's refusal is a result the test asserts on
                if not c.get("collect_errors"):
                    raise
                out.append({"status": "ERROR", "error": f"{type(e).__name__}: {e}"})
        return out

    def _send_async(self, p: Producer, specs: list[dict[str, Any]], timeout: float) -> Any:
        results: list[Any] = [None] * len(specs)
        done = threading.Semaphore(0)
        keep: list[Any] = []
        for i, s in enumerate(specs):
            msg, _ = build_message(s)
            keep.append(msg)

            def ok(r: Any, i: int = i) -> None:
                results[i] = result_dict(r)
                done.release()

            def failed(e: Exception, i: int = i) -> None:
                results[i] = {"status": "ERROR", "error": str(e)}
                done.release()

            p.send_async(msg, ok, failed)
        deadline = time.monotonic() + timeout
        for _ in specs:
            if not done.acquire(timeout=max(0.0, deadline - time.monotonic())):
                break
        return results

    def op_stream_start(self, c: dict[str, Any]) -> Any:
        """Send sync, one after another, until stream_stop; every outcome is an event."""
        p = self.producer
        assert p is not None, "producer_start first"
        self.stream_stop.clear()

        def run(lane: int) -> None:
            i = 0
            while not self.stream_stop.is_set():
                key = f"{c['prefix']}-{lane}-{i}"
                msg, _ = build_message({"topic": c["topic"], "tags": c.get("tags"), "keys": key, "body": {"text": key}})
                try:
                    r = p.send_sync(msg)
                    with _out_lock:
                        self.stream_counts["ok"] += 1
                    emit("E", {"ev": "sent", "key": key, "ok": True, **result_dict(r)})
                except Exception as e:
                    with _out_lock:
                        self.stream_counts["failed"] += 1
                    emit("E", {"ev": "sent", "key": key, "ok": False, "error": str(e)[:300]})
                    time.sleep(0.05)  # the broker is gone: do not spin
                i += 1

        self.streams = [threading.Thread(target=run, args=(lane,), daemon=True) for lane in range(c.get("threads", 1))]
        for t in self.streams:
            t.start()
        return "streaming"

    def op_stream_stop(self, c: dict[str, Any]) -> Any:
        self.stream_stop.set()
        deadline = time.monotonic() + c.get("timeout", 30.0)
        for t in self.streams:
            t.join(max(0.0, deadline - time.monotonic()))
            if t.is_alive():
                raise RuntimeError("a sending thread did not stop")
        return dict(self.stream_counts)

    def op_producer_shutdown(self, c: dict[str, Any]) -> Any:
        p, self.producer = self.producer, None
        if p is not None and not run_with_timeout(p.shutdown, c.get("timeout", 15.0)):
            raise RuntimeError("producer shutdown hung")
        return "shutdown"

    # push consumer ----------------------------------------------------------------------------
    def op_consumer_start(self, c: dict[str, Any]) -> Any:
        cid = c["cid"]
        model = MessageModel.BROADCASTING if c.get("model") == "BROADCASTING" else MessageModel.CLUSTERING
        pc = PushConsumer(c["group"], orderly=bool(c.get("orderly")), message_model=model)
        self.graveyard.append(pc)
        pc.set_namesrv_addr(c["namesrv"])
        if c.get("credentials"):
            pc.set_session_credentials(*c["credentials"])
        if c.get("instance"):
            pc.set_instance_name(c["instance"])
        if c.get("threads"):
            pc.set_thread_count(int(c["threads"]))
        props = list(c.get("props") or [])
        fail_times = int(c.get("fail_times") or 0)
        fail_once = set(c.get("fail_once_keys") or [])  # keys whose first delivery fails

        def on_message(m: Any) -> None:
            ev = describe(m, cid, props)
            # A listener that fails the first ``fail_times`` deliveries of each message: the client
            # answers RECONSUME_LATER and sends the message back to the broker.
            key = _text(m.keys)
            failing = m.reconsume_times < fail_times or key in fail_once
            fail_once.discard(key)
            ev["failed"] = failing
            emit("E", ev)
            if failing:
                raise RuntimeError(f"planned failure {m.reconsume_times + 1} of {fail_times}")

        if fail_times or fail_once:
            subscribe_with_status(pc, c["topic"], on_message, c.get("expr", "*"))
        else:
            pc.subscribe(c["topic"], on_message, c.get("expr", "*"))
        pc.start()
        self.consumers[cid] = pc
        return "started"

    def op_consumer_shutdown(self, c: dict[str, Any]) -> Any:
        pc = self.consumers.pop(c["cid"])
        t0 = time.monotonic()
        if not run_with_timeout(pc.shutdown, c.get("timeout", 20.0)):
            raise RuntimeError("consumer shutdown hung")
        return {"seconds": round(time.monotonic() - t0, 3)}

    # pull consumer ----------------------------------------------------------------------------
    def op_pull(self, c: dict[str, Any]) -> Any:
        pc = PullConsumer(c["group"])
        self.graveyard.append(pc)
        pc.set_namesrv_addr(c["namesrv"])
        pc.start()
        got: list[dict[str, Any]] = []
        deadline = time.monotonic() + c.get("timeout", 30.0)
        props = list(c.get("props") or [])
        rounds = 0
        while len(got) < c["expect"] and time.monotonic() < deadline:
            rounds += 1
            before = len(got)
            for m in pc.pull(c["topic"], c.get("expr", "*"), c.get("max_num", 32)):
                got.append(describe(m, "pull", props))
            if len(got) == before:
                time.sleep(0.1)  # a pull consumer polls: nothing new in any queue yet
        offsets = dict(PullConsumer.offset_table)
        run_with_timeout(pc.shutdown, 15.0)
        return {"messages": got, "rounds": rounds, "offsets": offsets}

    # lifecycle --------------------------------------------------------------------------------
    def op_ping(self, c: dict[str, Any]) -> Any:
        return {"pid": os.getpid()}

    def op_exit(self, c: dict[str, Any]) -> Any:
        hung = []
        for cid in list(self.consumers):
            try:
                self.op_consumer_shutdown({"cid": cid, "timeout": c.get("timeout", 15.0)})
            except RuntimeError:
                hung.append(cid)
        self.stream_stop.set()
        try:
            self.op_producer_shutdown({"timeout": c.get("timeout", 15.0)})
        except RuntimeError:
            hung.append("producer")
        return {"hung": hung}


def main() -> None:
    lifetime = float(sys.argv[1]) if len(sys.argv) > 1 else 300.0

    def reaper() -> None:
        time.sleep(lifetime)
        emit("E", {"ev": "lifetime_expired"})
        os._exit(3)

    threading.Thread(target=reaper, daemon=True).start()
    agent = Agent()
    emit("E", {"ev": "ready", "pid": os.getpid()})
    for line in sys.stdin:
        if not line.strip():
            continue
        cmd = json.loads(line)
        op = cmd.get("op")
        try:
            result = getattr(agent, f"op_{op}")(cmd)
            emit("R", {"id": cmd.get("id"), "ok": True, "result": result})
        except Exception as e:
            emit("R", {"id": cmd.get("id"), "ok": False, "error": f"{type(e).__name__}: {e}",
                       "trace": traceback.format_exc()[-2000:]})
        if op == "exit":
            break
    sys.stdout.flush()
    # Never run the C++ client's static destructors: they are where it likes to hang or crash.
    os._exit(0)


if __name__ == "__main__":
    main()

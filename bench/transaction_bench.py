"""Transaction throughput against plain sends, same broker, same run.

Figures (one ``tidalmq standalone``, ASYNC_FLUSH, messages of BODY bytes, INFLIGHT requests in flight):
- plain: SEND_MESSAGE_V2, acked sends/s;
- tx_oneway: half message (TRAN_MSG, PGROUP) then END_TRANSACTION commit sent oneway as official clients do;
  transactions/s until the broker has recorded every commit (runtime info ``transaction.commits``);
- tx_acked: the same with END_TRANSACTION as a request (commit stored, op recorded, answered);
- rollback: half + oneway rollback, transactions/s;
- client_plain / client_tx: our Python client, Producer.send vs TransactionProducer.send_in_transaction.
Writes bench/out/transaction-*.json.

    .venv/bin/python bench/transaction_bench.py [--quick] [--compare bench/out/transaction-latest.json]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from tests.broker.rawclient import runtime_info, send_cmd  # noqa: E402
from tests.support import Standalone  # noqa: E402

from bench.common import compare, print_machine, save  # noqa: E402
from tidalmq.client import Message, Producer, TransactionProducer, TransactionState  # noqa: E402
from tidalmq.common.msgid import decode_offset_msg_id  # noqa: E402
from tidalmq.remoting.codes import RequestCode, ResponseCode  # noqa: E402
from tidalmq.remoting.command import RemotingCommand  # noqa: E402
from tidalmq.remoting.transport import RemotingClient  # noqa: E402

QUEUES = 4
INFLIGHT = 256
BODY = 256
GROUP = "BenchTxGroup"


def half_cmd(topic: str, i: int) -> RemotingCommand:
    cmd = send_cmd(topic, b"x" * BODY, queue_id=i % QUEUES, group=GROUP,
                   props={"TRAN_MSG": "true", "PGROUP": GROUP, "UNIQ_KEY": uuid.uuid4().hex.upper()})
    cmd.ext_fields["f"] = "4"  # TRANSACTION_PREPARED_TYPE, as clients set it
    return cmd


def end_cmd(resp: RemotingCommand, kind: int) -> RemotingCommand:
    _, _, clo = decode_offset_msg_id(resp.ext_fields["msgId"])
    return RemotingCommand(code=RequestCode.END_TRANSACTION, ext_fields={
        "producerGroup": GROUP, "tranStateTableOffset": resp.ext_fields["queueOffset"], "commitLogOffset": str(clo),
        "commitOrRollback": str(kind), "fromTransactionCheck": "false"})


async def pooled(n: int, one: Callable[[int], Awaitable[None]]) -> float:
    sem = asyncio.Semaphore(INFLIGHT)

    async def run(i: int) -> None:
        async with sem:
            await one(i)

    t0 = time.perf_counter()
    await asyncio.gather(*(run(i) for i in range(n)))
    return time.perf_counter() - t0


async def wait_counter(c: RemotingClient, addr: str, key: str, target: int, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while int((await runtime_info(c, addr)).get(key, "0")) < target:
        if time.monotonic() > deadline:
            raise AssertionError(f"{key} never reached {target}")
        await asyncio.sleep(0.005)


async def raw_figures(addr: str, n: int) -> dict[str, Any]:
    c = RemotingClient()
    out: dict[str, Any] = {}
    try:
        topic = f"BenchTx_{uuid.uuid4().hex[:8]}"
        # warm-up: creates the topic and the half / op queues
        for i in range(200):
            r = await c.invoke(addr, half_cmd(topic, i), 10)
            assert r.code == ResponseCode.SUCCESS, r.remark
            await c.invoke(addr, end_cmd(r, 8), 10)

        async def plain(i: int) -> None:
            r = await c.invoke(addr, send_cmd(topic, b"x" * BODY, queue_id=i % QUEUES), 30)
            assert r.code == ResponseCode.SUCCESS, r.remark

        out["plain_msgs_per_s"] = n / await pooled(n, plain)

        base = int((await runtime_info(c, addr))["transaction.commits"])
        conn = await c.connection(addr)

        async def tx_oneway(i: int) -> None:
            r = await c.invoke(addr, half_cmd(topic, i), 30)
            assert r.code == ResponseCode.SUCCESS, r.remark
            conn.invoke_oneway(end_cmd(r, 8))

        t0 = time.perf_counter()
        await pooled(n, tx_oneway)
        half_done = time.perf_counter() - t0
        await wait_counter(c, addr, "transaction.commits", base + n)
        out["tx_oneway_per_s"] = n / (time.perf_counter() - t0)
        out["tx_oneway_half_acks_per_s"] = n / half_done

        async def tx_acked(i: int) -> None:
            r = await c.invoke(addr, half_cmd(topic, i), 30)
            assert r.code == ResponseCode.SUCCESS, r.remark
            e = await c.invoke(addr, end_cmd(r, 8), 30)
            assert e.code == ResponseCode.SUCCESS, e.remark

        out["tx_acked_per_s"] = n / await pooled(n, tx_acked)

        base = int((await runtime_info(c, addr))["transaction.rollbacks"])

        async def rollback(i: int) -> None:
            r = await c.invoke(addr, half_cmd(topic, i), 30)
            assert r.code == ResponseCode.SUCCESS, r.remark
            conn.invoke_oneway(end_cmd(r, 12))

        t0 = time.perf_counter()
        await pooled(n, rollback)
        await wait_counter(c, addr, "transaction.rollbacks", base + n)
        out["rollback_per_s"] = n / (time.perf_counter() - t0)
    finally:
        await c.close()
    return out


class _Commit:
    def execute_local_transaction(self, msg: Any, arg: Any) -> TransactionState:
        return TransactionState.COMMIT

    def check_local_transaction(self, msg: Any) -> TransactionState:
        return TransactionState.COMMIT


async def client_figures(ns: str, addr: str, n: int) -> dict[str, Any]:
    topic = f"BenchTxC_{uuid.uuid4().hex[:8]}"
    out: dict[str, Any] = {}
    async with Producer("BenchPlainPG", ns) as p:
        await p.send(Message(topic, b"warm"))

        async def plain(i: int) -> None:
            r = await p.send(Message(topic, b"x" * BODY))
            assert r.ok

        out["client_plain_msgs_per_s"] = n / await pooled(n, plain)
    c = RemotingClient()
    try:
        async with TransactionProducer("BenchTxPG", _Commit(), ns) as tp:
            await tp.send_in_transaction(Message(topic, b"warm"))
            base = int((await runtime_info(c, addr))["transaction.commits"])

            async def tx(i: int) -> None:
                r = await tp.send_in_transaction(Message(topic, b"x" * BODY))
                assert r.local_state == TransactionState.COMMIT

            t0 = time.perf_counter()
            await pooled(n, tx)
            await wait_counter(c, addr, "transaction.commits", base + n)
            out["client_tx_per_s"] = n / (time.perf_counter() - t0)
    finally:
        await c.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="smaller runs (a smoke test of the bench itself)")
    ap.add_argument("-n", type=int, default=0, help="messages / transactions per figure")
    ap.add_argument("--compare", help="a previous bench/out/transaction-*.json to compare with")
    args = ap.parse_args()
    n = args.n or (2000 if args.quick else 30000)
    print_machine()
    with tempfile.TemporaryDirectory() as tmp:
        s = Standalone(Path(tmp) / "data", {"mappedFileSizeCommitLog": str(256 * 1024 * 1024)})
        s.start()
        try:
            results = asyncio.run(raw_figures(s.broker_addr, n))
            results.update(asyncio.run(client_figures(s.namesrv_addr, s.broker_addr, max(1000, n // 5))))
        finally:
            s.stop()
    results["n"] = n
    results["tx_vs_plain"] = results["tx_oneway_per_s"] / results["plain_msgs_per_s"]
    results["client_tx_vs_plain"] = results["client_tx_per_s"] / results["client_plain_msgs_per_s"]
    print(f"\n{n} each, {BODY}-byte bodies, {INFLIGHT} in flight, one connection:")
    for key, value in results.items():
        print(f"  {key:34s} {value:>12.2f}" if isinstance(value, float) else f"  {key:34s} {value:>12}")
    print(f"saved {save('transaction', results)}")
    compare(args.compare, results)


if __name__ == "__main__":
    main()

"""Recovery after SIGKILL: how long a standalone takes to come back on a large CommitLog, phase by phase.

A child process fills a store in-process (1 KiB messages with keys, several topics and queues, the records
encoded once and appended in big batches), waits until reput has dispatched everything and the flush
services have run, then is SIGKILLed: the abort file stays and the checkpoint is as a crash leaves it.

Cases:

* ``crash``  the checkpoint as the crash left it, ``--behind`` bytes (default 64 MiB) behind the CommitLog
             (the checkpoint moves with the thorough ConsumeQueue flush, every 60 s): the realistic case.
* ``rewind`` the checkpoint zeroed and the crash made a reboot's, so every ConsumeQueue and the index are
             rebuilt from the first file: the worst case.

For each case: ``tidalmq standalone`` from exec to its ready line (``standalone_s``), and the store's own
recovery in-process, phase by phase (``load_s`` open files, ``recover_s`` CommitLog scan with CRC +
re-dispatch of ConsumeQueues and index), and seconds per GiB. The timer store's load (no timer messages
here) is inside the standalone figure only.

    .venv/bin/python bench/recovery_bench.py [--gib 1.0] [--file-mib 1024] [--profile] [--py-spy]
        [--compare bench/out/recovery-latest.json]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import compare, print_machine, save  # noqa: E402
from tidalmq.common.record import encode_record  # noqa: E402
from tidalmq.store.config import MessageStoreConfig  # noqa: E402
from tidalmq.store.message_store import DefaultMessageStore, PutRequest  # noqa: E402

TOPICS = ("RecoveryA", "RecoveryB", "RecoveryC", "RecoveryD")
QUEUES = 4
BODY = 1024
RATE_MIB_S = 20  # the write rate the store timestamps pretend (1 KiB messages: ~20,000 a second)
READY = re.compile(r"standalone ready")


def store_config(data_dir: Path, file_mib: int) -> MessageStoreConfig:
    """The store a ``tidalmq standalone --data-dir data_dir`` opens (its layout: ``data_dir/store``)."""
    return MessageStoreConfig(store_path_root_dir=str(data_dir / "store"),
                              mapped_file_size_commit_log=file_mib * 1024 * 1024)


def fill(data_dir: Path, total_bytes: int, file_mib: int, behind_bytes: int) -> None:
    """Append about ``total_bytes`` of CommitLog, the last ``behind_bytes`` of it after the last checkpoint
    (as a crash finds it: the thorough ConsumeQueue flush that advances the checkpoint runs every minute),
    wait for reput, print 'filled', sleep until killed."""
    # Store timestamps as if written at RATE_MIB_S and ending now: the checkpoint's 3 s margin (and the
    # bytes behind it) must cover what a broker writes in 3 s, not what this fast in-process fill does.
    per_ms = RATE_MIB_S * 2**20 / 1000
    base = int(time.time() * 1000 - total_bytes / per_ms)
    written = i = 0

    def clock() -> int:
        return base + int(written / per_ms)

    store = DefaultMessageStore(store_config(data_dir, file_mib), clock=clock)
    assert store.load()
    store.start()
    protos = [(t, q, encode_record(topic=t, queue_id=q, body=b"r" * BODY,
                                   properties={"TAGS": "TagA", "KEYS": f"key-{t}-{q}", "UNIQ_KEY": "0" * 32}))
              for t in TOPICS for q in range(QUEUES)]
    checkpointed = False
    while written < total_bytes:
        if not checkpointed and written >= total_bytes - behind_bytes:
            assert store.wait_reput(store.max_phy_offset, 600)
            store.flush_consume_queues(0)  # the periodic thorough flush: queues, index, checkpoint
            checkpointed = True
        batch = []
        for _ in range(256):
            t, q, rec = protos[i % len(protos)]
            batch.append(PutRequest(t, q, [bytearray(rec)]))
            written += len(rec)
            i += 1
        store.put_messages(batch)
    assert store.wait_reput(store.max_phy_offset, 600)
    print(f"filled {written} {i}", flush=True)
    time.sleep(3600)


def build_crashed_store(data_dir: Path, total_bytes: int, file_mib: int = 1024, behind_bytes: int = 64 << 20,
                        timeout: float = 600) -> int:
    """A store under ``data_dir`` (a standalone's data dir) holding ``total_bytes`` of messages, the last
    ``behind_bytes`` written after the checkpoint, left as a SIGKILL leaves it. Returns the message count."""
    proc = subprocess.Popen([sys.executable, __file__, "--fill", str(data_dir), "--bytes", str(total_bytes),
                             "--file-mib", str(file_mib), "--behind", str(behind_bytes)],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + timeout
        for line in proc.stdout:
            if line.startswith("filled"):
                return int(line.split()[2])
            if time.monotonic() > deadline:
                break
        raise RuntimeError(f"filling the store failed: exit {proc.poll()}")
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)


def rewind_checkpoint(data_dir: Path, file_mib: int) -> None:
    """Zero the checkpoint and make the crash look like a reboot's (the abort file names another boot, see
    docs/broker.md "Recovery after a crash"): nothing is known durable, queues and index are rebuilt from the
    first file. In the same boot, recovery would find every queue entry in place and rebuild none."""
    cfg = store_config(data_dir, file_mib)
    size = os.path.getsize(cfg.checkpoint_path)
    with open(cfg.checkpoint_path, "r+b") as f:
        f.write(b"\0" * size)
    with open(cfg.abort_path, "wb") as f:
        f.write(b"a-boot-before-a-reboot")


def time_standalone(data_dir: Path, file_mib: int, py_spy: Path | None = None, timeout: float = 600) -> float:
    """Seconds from exec to the ready line. With ``py_spy``, sampled by py-spy (raw stacks to that path)."""
    from tests.support import free_port_pair

    ns, br = free_port_pair()
    cmd = [sys.executable, "-m", "tidalmq.cli", "standalone", "--data-dir", str(data_dir), "--namesrv-port",
           str(ns), "--broker-port", str(br), "--grpc-port", "0", "--console-port", "-1", "--set", "metricsExporterType=DISABLE",
           "--set", f"mappedFileSizeCommitLog={file_mib * 1024 * 1024}"]
    if py_spy is not None:
        cmd = [str(Path(sys.executable).with_name("py-spy")), "record", "-r", "250", "-f", "raw", "-o", str(py_spy),
               "--", *cmd]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            if READY.search(line):
                return time.perf_counter() - t0
            if time.perf_counter() - t0 > timeout:
                break
        raise RuntimeError("standalone did not become ready")
    finally:
        # SIGKILL leaves the crash state for the next measurement; under py-spy kill the standalone itself, so
        # py-spy sees it exit and writes its samples.
        if py_spy is not None:
            import psutil

            for child in psutil.Process(proc.pid).children():
                child.kill()
        else:
            proc.send_signal(signal.SIGKILL)
        proc.wait(30)


def top_frames(raw: Path, n: int = 8) -> list[tuple[str, float]]:
    """The functions most often on top of the stack in py-spy's raw output, with their share of samples."""
    leaves: dict[str, int] = {}
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        leaf = stack.rsplit(";", 1)[-1]
        leaves[leaf] = leaves.get(leaf, 0) + int(count)
        total += int(count)
    return [(k, v / total) for k, v in sorted(leaves.items(), key=lambda kv: -kv[1])[:n]]


def time_phases(data_dir: Path, file_mib: int, profile: str | None) -> dict[str, float]:
    """The store's recovery in-process, phase by phase (files are opened and recovered, nothing started)."""
    store = DefaultMessageStore(store_config(data_dir, file_mib))
    t0 = time.perf_counter()
    store.commit_log.mfq.load()
    store._load_consume_queues()  # noqa: SLF001 - the phases of load(), timed apart
    t1 = time.perf_counter()
    prof = None
    if profile:
        import cProfile

        prof = cProfile.Profile()
        prof.enable()
    from tidalmq.store.checkpoint import StoreCheckpoint

    store.checkpoint = StoreCheckpoint(store.config.checkpoint_path)
    if store.index_service is not None:
        store.index_service.load(False)
    store._process_crash = store.abort_file.crashed_in_this_boot()  # noqa: SLF001 - as load() finds it
    store._recover(False)  # noqa: SLF001
    t2 = time.perf_counter()
    if prof is not None:
        prof.disable()
        prof.dump_stats(profile)
    store._close()  # noqa: SLF001 - keep the abort file: the next case starts from the same crash
    return {"load_s": t1 - t0, "recover_s": t2 - t1}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gib", type=float, default=1.0, help="CommitLog to build, GiB")
    ap.add_argument("--file-mib", type=int, default=1024, help="mappedFileSizeCommitLog, MiB")
    ap.add_argument("--profile", action="store_true", help="cProfile the recovery phase to bench/out/*.prof")
    ap.add_argument("--py-spy", action="store_true",
                    help="also run each standalone start under py-spy (raw stacks in bench/out, top frames printed)")
    ap.add_argument("--compare", help="a previous bench/out/recovery-*.json")
    ap.add_argument("--keep", help="build into this directory and keep it")
    ap.add_argument("--fill", help=argparse.SUPPRESS)
    ap.add_argument("--bytes", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--behind", type=int, default=64 << 20,
                    help="bytes written after the last checkpoint (default 64 MiB: a minute at ~1 MiB/s)")
    args = ap.parse_args()
    if args.fill:
        fill(Path(args.fill), args.bytes, args.file_mib, args.behind)
        return 0
    print_machine()
    root = Path(args.keep or tempfile.mkdtemp(prefix="tidalmq-recovery-"))
    data = root / "data"
    total = int(args.gib * 2**30)
    t0 = time.perf_counter()
    n = build_crashed_store(data, total, args.file_mib, args.behind)
    print(f"built {n} messages ({total / 2**30:.2f} GiB, files of {args.file_mib} MiB) in "
          f"{time.perf_counter() - t0:.1f} s")
    gib = total / 2**30
    results: dict[str, float] = {"gib": gib, "messages": n}
    try:
        for case in ("crash", "rewind"):
            snapshot = root / f"cp-{case}"
            if case == "rewind":
                rewind_checkpoint(data, args.file_mib)
            shutil.copytree(data / "store", snapshot, ignore=shutil.ignore_patterns("commitlog"))
            prof = str(Path(__file__).parent / "out" / f"recovery-{case}.prof") if args.profile else None
            if prof:
                Path(prof).parent.mkdir(parents=True, exist_ok=True)
            phases = time_phases(data, args.file_mib, prof)
            # Same crash state again for the standalone: the queues, index and checkpoint as they were.
            _restore(snapshot, data / "store")
            standalone = time_standalone(data, args.file_mib)
            _restore(snapshot, data / "store")
            if args.py_spy:
                raw = Path(__file__).parent / "out" / f"recovery-{case}-standalone.txt"
                time_standalone(data, args.file_mib, raw)
                _restore(snapshot, data / "store")
                print(f"{case}: py-spy samples of the standalone start in {raw}; most on top of the stack:")
                for frame, share in top_frames(raw):
                    print(f"  {share:6.1%}  {frame}")
            for k, v in phases.items():
                results[f"{case}_{k}"] = v
            results[f"{case}_standalone_s"] = standalone
            results[f"{case}_standalone_s_per_gib"] = standalone / gib
            print(f"{case:7s} standalone ready {standalone:6.2f} s ({standalone / gib:.2f} s/GiB); store: "
                  + ", ".join(f"{k} {v:.2f}" for k, v in phases.items()))
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    path = save("recovery", results)
    print(f"saved {path}")
    compare(args.compare, results)
    return 0


def _restore(snapshot: Path, store_dir: Path) -> None:
    """Put back everything but the CommitLog (recovery does not rewrite valid CommitLog data)."""
    for item in store_dir.iterdir():
        if item.name == "commitlog":
            continue
        if item.is_dir():
            shutil.rmtree(item)
        else:
            item.unlink()
    for item in snapshot.iterdir():
        if item.is_dir():
            shutil.copytree(item, store_dir / item.name)
        else:
            shutil.copy2(item, store_dir / item.name)


if __name__ == "__main__":
    sys.exit(main())

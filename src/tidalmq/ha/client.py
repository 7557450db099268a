"""HAClient: the slave's side of replication (RocketMQ's HAClient), an asyncio task on the broker's loop.

It connects to the master's HA address, reports its CommitLog max offset, appends what the master
streams at exactly the offset it names and reports again; a gap, a refused append or a master silent
for haHousekeepingInterval closes the connection, and it reconnects from its own offset.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

from tidalmq.ha.config import HAConfig
from tidalmq.ha.frames import Frame, FrameError, FrameReader, RecordAssembler, encode_hello, encode_report
from tidalmq.store.api import MessageStore

log = logging.getLogger(__name__)

# A read takes whatever the socket holds, up to this much: everything one read brought is appended with one
# write (per CommitLog file) and acknowledged with one report, however many frames it held.
READ_CHUNK = 1024 * 1024
# RocketMQ's HAClient waits 5 s after a failed connect; ours retries sooner, a connect being cheap and
# the slave's lag growing meanwhile.
RECONNECT_DELAY_S = 1.0
CONNECT_TIMEOUT_S = 3.0


class HAClient:
    def __init__(self, config: HAConfig, store: MessageStore) -> None:
        self.config = config
        self.store = store
        self.master_address = ""
        self._address_changed = asyncio.Event()
        self.connected = False
        self.current_reported_offset = -1

    def update_master_address(self, addr: str) -> None:
        """From haMasterAddress or the NameServer's answer to this slave's registration."""
        if addr and addr != self.master_address:
            log.info("HA: master HA address %s (was %r)", addr, self.master_address)
            self.master_address = addr
            self._address_changed.set()

    async def run(self) -> None:
        while True:
            if not self.master_address:
                self._address_changed.clear()
                await self._address_changed.wait()
                continue
            try:
                await self._session(self.master_address)
            except (OSError, ConnectionError, TimeoutError, FrameError) as e:
                log.warning("HA: connection to master %s ended: %s", self.master_address, e)
            finally:
                self.connected = False
            self._address_changed.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(RECONNECT_DELAY_S):
                    await self._address_changed.wait()

    async def _session(self, addr: str) -> None:
        host, _, port = addr.rpartition(":")
        async with asyncio.timeout(CONNECT_TIMEOUT_S):
            reader, writer = await asyncio.open_connection(host, int(port))
        self.connected = True
        log.info("HA: connected to master %s, CommitLog at %d", addr, self.store.max_phy_offset)
        try:
            await self._stream(addr, reader, writer)
        finally:
            writer.close()
            with contextlib.suppress(OSError, ConnectionError):
                await writer.wait_closed()

    async def _stream(self, addr: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        cfg = self.config
        store = self.store
        frames = FrameReader()
        records = RecordAssembler(store.config.mapped_file_size_commit_log,
                                  None if store.commit_log_is_empty else store.max_phy_offset)
        heartbeat = cfg.ha_send_heartbeat_interval / 1000.0
        housekeeping = cfg.ha_housekeeping_interval / 1000.0
        if cfg.enable_controller_mode:
            # The master counts acks per replica of its SyncStateSet (allAckInSyncStateSet): say which one.
            writer.write(encode_hello(cfg.broker_id))
        self._report(writer)
        last_read = last_report = time.monotonic()
        while True:
            try:
                async with asyncio.timeout(heartbeat):
                    data = await reader.read(READ_CHUNK)
            except TimeoutError:
                data = None
            now = time.monotonic()
            if self.master_address != addr:
                # Told of another master (controller mode's record): leave at once. A master cut off by a
                # partition sends no FIN, and waiting out haHousekeepingInterval would hold the new master's
                # SYNC sends without a slave for that long.
                raise ConnectionError(f"the master moved to {self.master_address}")
            if data is not None:
                if not data:
                    raise ConnectionError("the master closed the connection")
                last_read = now
                self._append_runs(records, frames.feed(data))
                # RocketMQ's reportSlaveMaxOffsetPlus: report after each receive that moved the offset.
                if store.max_phy_offset != self.current_reported_offset:
                    self._report(writer)
                    last_report = now
            elif now - last_read > housekeeping:
                raise TimeoutError(f"nothing from the master for {housekeeping:.0f} s")
            if now - last_report >= heartbeat:
                self._report(writer)
                last_report = now
            await writer.drain()

    def _append_runs(self, records: RecordAssembler, got: list[Frame]) -> None:
        """Append the whole records of ``got`` with as few writes as the CommitLog's files allow: each
        append costs a pwrite, a wake of the flush and reput threads and (after the read) a report, so
        many small frames appended one by one cost the slave more than the bytes do."""
        file_size = records.file_size
        parts: list[bytes] = []
        at = ts = 0
        for frame in got:
            run = records.push(frame)
            if run is None:
                continue
            if parts and run.offset % file_size == 0:  # a new file: an append never crosses a file's end
                self._append(at, parts, ts)
                parts = []
            if not parts:
                at = run.offset
            parts.append(run.data)
            ts = run.store_timestamp or ts
        if parts:
            self._append(at, parts, ts)

    def _append(self, at: int, parts: list[bytes], ts: int) -> None:
        data = parts[0] if len(parts) == 1 else b"".join(parts)
        if not self.store.append_to_commit_log(at, data, ts):
            raise FrameError(f"the CommitLog refused {len(data)} bytes at {at} "
                             f"(it ends at {self.store.max_phy_offset})")

    def _report(self, writer: asyncio.StreamWriter) -> None:
        self.current_reported_offset = self.store.max_phy_offset
        writer.write(encode_report(self.current_reported_offset))

    def runtime_info(self) -> dict[str, str]:
        return {
            "haMasterAddress": self.master_address,
            "haConnectedToMaster": str(self.connected).lower(),
            "haReportedOffset": str(self.current_reported_offset),
        }

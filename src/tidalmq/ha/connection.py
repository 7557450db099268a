"""HAConnection: the master's end of one slave's connection (RocketMQ's ReadSocketService and
WriteSocketService, as two asyncio tasks on the broker's loop)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import TYPE_CHECKING

from tidalmq.ha.frames import FrameError, ReportReader, encode_header

if TYPE_CHECKING:
    from tidalmq.ha.service import HAService

log = logging.getLogger(__name__)

READ_CHUNK = 64 * 1024
BURST_BYTES = 1024 * 1024


class HAConnection:
    def __init__(self, service: HAService, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.service = service
        self.reader = reader
        self.writer = writer
        peer = writer.get_extra_info("peername")
        self.client_addr = f"{peer[0]}:{peer[1]}" if peer else "?"
        # -1 until the slave's first report: where it asks the stream to start.
        self.slave_request_offset = -1
        self.slave_ack_offset = -1
        self.replica_id: int | None = None  # controller mode: the slave's replica id (its hello)
        self.wake = asyncio.Event()  # set when the CommitLog grew (or the first report came)
        self._last_read = time.monotonic()

    async def run(self) -> None:
        """Serve the slave until either direction fails or it stays silent for haHousekeepingInterval."""
        tasks = [asyncio.ensure_future(self._read_loop()), asyncio.ensure_future(self._write_loop())]
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            self.writer.close()
            with contextlib.suppress(OSError, ConnectionError, asyncio.CancelledError):
                await self.writer.wait_closed()

    async def _read_loop(self) -> None:
        cfg = self.service.config
        reports = ReportReader()
        housekeeping = cfg.ha_housekeeping_interval / 1000.0
        while True:
            try:
                async with asyncio.timeout(housekeeping):
                    data = await self.reader.read(READ_CHUNK)
            except TimeoutError:
                log.warning("HA: slave %s silent for %.0f s, closing its connection", self.client_addr, housekeeping)
                return
            except (OSError, ConnectionError) as e:
                log.info("HA: slave %s read failed: %s", self.client_addr, e)
                return
            if not data:
                log.info("HA: slave %s closed its connection", self.client_addr)
                return
            try:
                offset = reports.feed(data)
            except FrameError as e:
                log.error("HA: slave %s: %s", self.client_addr, e)
                return
            if reports.replica_id is not None and self.replica_id is None:
                self.replica_id = reports.replica_id
                log.info("HA: slave %s is replica %d", self.client_addr, self.replica_id)
            if offset is None:
                continue
            if self.slave_request_offset < 0:
                self.slave_request_offset = offset
                log.info("HA: slave %s requests the CommitLog from %d", self.client_addr, offset)
                self.wake.set()
            elif offset > self.service.store.max_phy_offset:
                log.error("HA: slave %s reports offset %d past this CommitLog's end %d", self.client_addr,
                          offset, self.service.store.max_phy_offset)
                return
            self.slave_ack_offset = offset
            self.service.notify_transfer_some(offset)

    async def _write_loop(self) -> None:
        svc = self.service
        cfg = svc.config
        store = svc.store
        file_size = store.config.mapped_file_size_commit_log
        heartbeat = cfg.ha_send_heartbeat_interval / 1000.0
        while self.slave_request_offset < 0:
            self.wake.clear()
            await self.wake.wait()
        next_offset = self.slave_request_offset
        if next_offset == 0:
            # A new slave: start at this master's last file (RocketMQ's rule), not at its first.
            end = store.max_phy_offset
            next_offset = end - end % file_size
        log.info("HA: transferring to slave %s from %d", self.client_addr, next_offset)
        last_write = time.monotonic()
        while True:
            self.wake.clear()
            data = store.get_commit_log_data(next_offset, cfg.ha_transfer_batch_size)
            if data is None and next_offset < store.min_phy_offset:
                log.error("HA: slave %s wants %d, below this CommitLog's first offset %d", self.client_addr,
                          next_offset, store.min_phy_offset)
                return
            if data is not None:
                # Frames of haTransferBatchSize each, as many as are ready up to BURST_BYTES, then one
                # drain: one pass of the event loop per burst rather than per frame.
                burst = 0
                while data is not None:
                    self.writer.write(encode_header(next_offset, len(data)))
                    # A copy (haTransferBatchSize at most): a transport may keep what it could not send
                    # yet, and a view would pin the mapped file, which retention must be free to unmap.
                    self.writer.write(bytes(data))
                    next_offset += len(data)
                    burst += len(data)
                    if burst >= BURST_BYTES:
                        break
                    data = store.get_commit_log_data(next_offset, cfg.ha_transfer_batch_size)
            elif time.monotonic() - last_write >= heartbeat:
                self.writer.write(encode_header(next_offset, 0))
            else:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(heartbeat):
                        await self.wake.wait()
                continue
            last_write = time.monotonic()
            await self.writer.drain()

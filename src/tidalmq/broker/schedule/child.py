"""Starting the schedule process (timerProcessEnable, docs/multicore.md): its command line, its config,
and the early start.

The ``standalone`` and ``broker`` commands start the child as soon as their configs are known, before
they import the broker (most of their ~0.5 s start-up): the child's own imports and the load of the
timer's files then run on another core meanwhile, and the first delivery after a restart comes that
much sooner. TimerProcess adopts that child as its first. The child reads nothing of the store before
the broker's first STATE either way, so starting it early changes no order the store depends on.

Kept light (no store, no schedule imports): it runs before the broker's modules are loaded.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tidalmq.broker.config import BrokerConfig
    from tidalmq.store.config import MessageStoreConfig

log = logging.getLogger(__name__)


def child_config(config: MessageStoreConfig) -> dict[str, Any]:
    """What the child is told on its command line: the store's paths and the timer's settings."""
    return {
        "root": str(Path(config.store_path_root_dir)), "commitLogPath": config.commit_log_path,
        "commitLogFileSize": config.mapped_file_size_commit_log,
        "consumeQueuePath": config.consume_queue_path,
        "consumeQueueFileSize": config.mapped_file_size_consume_queue,
        "precisionMs": config.timer_precision_ms, "maxDelayMs": config.timer_max_delay_sec * 1000,
        "parentPid": os.getpid(), "logLevel": logging.getLevelName(logging.getLogger().getEffectiveLevel()),
    }


def spawn(config: dict[str, Any]) -> tuple[subprocess.Popen[bytes], socket.socket]:
    """``python -m tidalmq.schedule.timer_host`` with one end of a socket pair; the other is returned.
    The child dies with the *thread* that started it (PR_SET_PDEATHSIG): start it from one that lives
    as long as the broker. It has a session of its own: a signal to the broker's process group (Ctrl-C in
    a terminal, ``timeout``) reaches the broker alone, which stops the child in order (STOP: it commits),
    instead of the child dying first and its exit being taken for a crash."""
    mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        cmd = [sys.executable, "-m", "tidalmq.schedule.timer_host", "--fd", str(theirs.fileno()),
               "--config", json.dumps(config)]
        proc = subprocess.Popen(cmd, pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL, start_new_session=True)
    except BaseException:
        mine.close()
        raise
    finally:
        theirs.close()
    return proc, mine


@dataclass
class EarlyChild:
    """A schedule process started before the broker that will adopt it."""

    proc: subprocess.Popen[bytes]
    sock: socket.socket
    config: dict[str, Any]

    def discard(self) -> None:
        """Not adopted (another config, a slave, a failed start): end it. It is at most loading."""
        self.sock.close()
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5.0)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def start_early(broker: BrokerConfig, store: MessageStoreConfig) -> EarlyChild | None:
    """The schedule process of a broker about to start in this process, started now from the calling
    thread (the main thread: it lives as long as the process), or None where the broker would start
    none: timer wheel or schedule process off, a slave, or controller mode (every replica starts as a
    slave there)."""
    if not (store.timer_wheel_enable and store.timer_process_enable) or broker.is_slave \
            or broker.enable_controller_mode:
        return None
    config = child_config(store)
    try:
        proc, sock = spawn(config)
    except OSError as e:  # the broker starts it again later, and reports a failure there
        log.warning("schedule process not started early: %s", e)
        return None
    return EarlyChild(proc, sock, config)

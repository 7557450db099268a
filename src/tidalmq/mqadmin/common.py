"""What every ``mqadmin`` subcommand shares: RocketMQ's common options, the admin client, time parsing,
RocketMQ's fixed-width output and a terminal progress counter."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Awaitable, Callable
from datetime import datetime

from tidalmq.client.admin import Admin

Handler = Callable[[Admin, argparse.Namespace], Awaitable[int]]


class UsageError(Exception):
    """A bad flag value: exit 2, one line on stderr."""


def command(sub: argparse._SubParsersAction, name: str, help_: str, func: Handler) -> argparse.ArgumentParser:
    """A subcommand with RocketMQ's common options (``-n``; ``-h`` comes from argparse)."""
    p = sub.add_parser(name, help=help_, description=help_)
    p.add_argument("-n", "--namesrvAddr", dest="namesrv",
                   help="Name server address list, eg: '192.168.0.1:9876;192.168.0.2:9876' (default $NAMESRV_ADDR)")
    p.set_defaults(func=func)
    return p


def parse_timestamp(text: str) -> int:
    """RocketMQ's timestamp flags: milliseconds, ``now``, or ``yyyy-MM-dd#HH:mm:ss:SSS`` (local time)."""
    if text == "now":
        return int(time.time() * 1000)
    if text.lstrip("-").isdigit():
        return int(text)
    try:
        return int(datetime.strptime(text, "%Y-%m-%d#%H:%M:%S:%f").timestamp() * 1000)
    except ValueError:
        raise UsageError(f"bad timestamp {text!r}: milliseconds, 'now' or yyyy-MM-dd#HH:mm:ss:SSS") from None


def front(text: str, size: int) -> str:
    """RocketMQ's UtilAll.frontStringAtLeast: at most ``size`` characters, the front ones."""
    return text[:size]


def day_time(ms: int) -> str:
    """UtilAll.formatDate(date, "yyyy-MM-dd HH:mm:ss"), local time."""
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ms / 1000))


def when(ms: int) -> str:
    """A timestamp the way RocketMQ's tools print one (UtilAll.timeMillisToHumanString2)."""
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ms / 1000)) + f",{ms % 1000:03d}"


class Progress:
    """An in-place counter on stderr for commands that scan; silent unless stderr is a terminal, so
    scripts parsing stdout (or stderr) never see it."""

    def __init__(self, what: str, total: int | None = None) -> None:
        self.what, self.total, self.done = what, total, 0
        self.live = sys.stderr.isatty()

    def step(self, n: int = 1) -> None:
        self.done += n
        if self.live:
            of = f"/{self.total}" if self.total is not None else ""
            sys.stderr.write(f"\r{self.what}: {self.done}{of}")
            sys.stderr.flush()

    def close(self) -> None:
        if self.live and self.done:
            sys.stderr.write("\n")
            sys.stderr.flush()

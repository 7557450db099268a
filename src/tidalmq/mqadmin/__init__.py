"""``mqadmin``: RocketMQ's admin command line, compatible: the same subcommand names, flags and output
lines, so operators' scripts that shell out to RocketMQ's ``mqadmin`` work against TidalMQ (docs/mqadmin.md).

Exit status 0 on success, 1 when the broker or NameServer refuses (``CODE: n DESC: remark`` on stderr, one
line), 2 for bad usage.

TLS as RocketMQ's tools take it from the JVM's system properties: the environment's ``tls.enable=true`` and
``tls.client.*`` / ``tls.config.file`` keys (``env tls.enable=true mqadmin topicList``; docs/tls.md)."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys

from tidalmq.admin_cli import admin_credentials
from tidalmq.client.admin import Admin, AdminError
from tidalmq.common.naming import NameError_
from tidalmq.mqadmin import cluster, group, message, stats, tidal, topic
from tidalmq.mqadmin.common import UsageError
from tidalmq.remoting.tls import client_context_from, tls_config
from tidalmq.remoting.transport import RemotingError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mqadmin", description="RocketMQ-compatible admin tool for TidalMQ")
    sub = parser.add_subparsers(dest="command", required=True, metavar="<command>")
    for module in (topic, group, message, cluster, stats, tidal):
        module.register(sub)
    return parser


def _fail(text: str, status: int) -> int:
    print("mqadmin: " + " ".join(text.split()), file=sys.stderr)  # one line, for scripts
    return status


async def _run(args: argparse.Namespace) -> int:
    async with Admin(args.namesrv, credentials=args.credentials, tls=args.tls) as admin:
        return int(await args.func(admin, args))


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    # ACL: signed as RocketMQ's tools sign, with the account of $ROCKETMQ_HOME/conf/tools.yml (or the
    # TIDALMQ_ACCESS_KEY / TIDALMQ_SECRET_KEY environment, as `tidalmq admin`)
    args.access_key = args.secret_key = None
    try:
        args.credentials = admin_credentials(args)
        # the producer and pull consumer some subcommands start speak TLS alike
        args.tls = client_context_from(tls_config(dict(os.environ)))
        return asyncio.run(_run(args))
    except (UsageError, ValueError, NameError_) as e:
        return _fail(str(e), 2)
    except AdminError as e:
        return _fail(f"CODE: {e.code} DESC: {e.remark}", 1)
    except (RemotingError, OSError, TimeoutError) as e:
        return _fail(f"connect failed: {e}", 1)


if __name__ == "__main__":
    sys.exit(main())

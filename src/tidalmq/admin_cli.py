"""``tidalmq admin``: what ``mqadmin`` has no command for (a group's dead letters), and the connection
options (NameServer, ACL account, TLS) ``tidalmq admin`` and ``tidalmq console`` share. Every other
operation is an mqadmin subcommand (docs/mqadmin.md)."""

from __future__ import annotations

import argparse
import os
import ssl
import sys
import time
from typing import TYPE_CHECKING

from tidalmq.acl.signature import SessionCredentials
from tidalmq.common.naming import NameError_
from tidalmq.remoting.tls import client_context as tls_context
from tidalmq.remoting.transport import RemotingError

if TYPE_CHECKING:
    # The client is imported when an admin command runs: every command builds this parser, and the namesrv
    # and broker commands never need the client (its import was much of their start: docs/benchmarks.md,
    # "Figures behind the code").
    from tidalmq.client.admin import Admin


def add_connection_options(p: argparse.ArgumentParser) -> None:
    """How an operator's tool reaches the cluster: ``tidalmq admin`` and ``tidalmq console``."""
    p.add_argument("-n", "--namesrv", help="NameServer address (default $NAMESRV_ADDR or 127.0.0.1:9876)")
    p.add_argument("--access-key", help="ACL account to sign requests with (default $TIDALMQ_ACCESS_KEY, "
                                        "else accessKey of $ROCKETMQ_HOME/conf/tools.yml)")
    p.add_argument("--secret-key", help="its secret (default $TIDALMQ_SECRET_KEY, else tools.yml's secretKey)")
    p.add_argument("--tls", action="store_true", help="speak TLS to the NameServer and brokers")
    p.add_argument("--tls-ca", help="verify the servers' certificates against this CA file (PEM)")
    p.add_argument("--tls-cert", help="client certificate (PEM), for tls.server.need.client.auth")
    p.add_argument("--tls-key", help="the client certificate's private key (PEM)")


def add_admin_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("admin", help="what mqadmin has no command for (a group's dead letters); mqadmin is the "
                                     "operator's tool", description=ADMIN_DESCRIPTION,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    add_connection_options(p)
    asub = p.add_subparsers(dest="admin_cmd", required=True)
    dl = asub.add_parser("dlq", help="dead letters of a group").add_subparsers(dest="dlq_cmd", required=True)
    dls = dl.add_parser("list", help="a group's dead letters: id, original topic, reconsume times, tags, keys")
    dls.add_argument("group")
    dls.add_argument("-n", "--max", type=int, default=100)


ADMIN_DESCRIPTION = """\
Only what mqadmin has no command for. Everything else is an mqadmin subcommand, RocketMQ's names and flags
(docs/mqadmin.md):
  topics             mqadmin updateTopic / topicList / topicStatus / deleteTopic
  consumer progress  mqadmin consumerProgress -g GROUP [-t TOPIC]
  brokers            mqadmin clusterList; brokerStatus -b ADDR (diskFull, diskFullReason)
  rewind a group     mqadmin resetOffsetByTime -g GROUP -t TOPIC -s TIME (live consumers replay at once)
  find messages      mqadmin queryMsgByKey / queryMsgById / queryMsgByUniqueKey (with the groups that consumed)
  scheduled          mqadmin scheduleStats / cancelScheduledMessage
  re-send letters    mqadmin resendDlqMessage -g GROUP (-i ID ... | -a)"""


def admin_credentials(args: argparse.Namespace) -> SessionCredentials | None:
    """The account ``tidalmq admin`` signs with (ACL, docs/acl.md): the options, else the environment,
    else mqadmin's ``$ROCKETMQ_HOME/conf/tools.yml``; None to send unsigned requests."""
    ak = args.access_key or os.environ.get("TIDALMQ_ACCESS_KEY")
    sk = args.secret_key or os.environ.get("TIDALMQ_SECRET_KEY")
    home = os.environ.get("ROCKETMQ_HOME")
    if not (ak or sk) and home:
        from tidalmq.acl import tools_credentials

        return tools_credentials(home)
    if not ak and not sk:
        return None
    if not ak or not sk:
        raise ValueError("an access key needs its secret key, and the other way round")
    return SessionCredentials(ak, sk)


def admin_tls(args: argparse.Namespace) -> ssl.SSLContext | None:
    """The TLS context of the ``--tls*`` options, None for plain connections."""
    if args.tls or args.tls_ca or args.tls_cert:
        return tls_context(trust_cert_path=args.tls_ca or "", cert_path=args.tls_cert or "", key_path=args.tls_key or "")
    return None


async def run_admin(args: argparse.Namespace) -> int:
    from tidalmq.client.admin import AdminError

    try:
        credentials = admin_credentials(args)
    except ValueError as e:
        print(f"tidalmq admin: {e}", file=sys.stderr)
        return 2
    from tidalmq.client.admin import Admin

    async with Admin(args.namesrv, credentials=credentials, tls=admin_tls(args)) as admin:
        try:
            return await _dlq_list(admin, args)
        except (AdminError, RemotingError) as e:
            print(f"tidalmq admin: error {e.code}: {e.remark}", file=sys.stderr)
            return 1
        except NameError_ as e:
            print(f"tidalmq admin: {e}", file=sys.stderr)
            return 2


def _table(rows: list[list[object]], header: list[str]) -> str:
    cols = [header, *[[str(c) for c in r] for r in rows]]
    widths = [max(len(r[i]) for r in cols) for i in range(len(header))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in cols)


async def _dlq_list(admin: Admin, args: argparse.Namespace) -> int:
    letters = await admin.dead_letters(args.group, args.max)
    if not letters:
        print(f"group {args.group} has no dead letters")
        return 0
    rows = [[m.properties.get("UNIQ_KEY") or m.offset_msg_id,
             m.properties.get("DLQ_ORIGIN_TOPIC") or m.properties.get("RETRY_TOPIC", ""), m.reconsume_times,
             m.properties.get("TAGS", ""), m.properties.get("KEYS", ""),
             time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(m.store_timestamp / 1000)), len(m.body)]
            for m in letters]
    print(_table(rows, ["msgId", "originTopic", "reconsumeTimes", "tags", "keys", "stored", "bodyBytes"]))
    return 0

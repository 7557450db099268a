"""The console's routes: each page asks the brokers through the admin client (tidalmq.client.admin) and
renders the answer (tidalmq.console.pages).

Security (docs/console.md): with credentials (the ACL account the console signs its requests with), every
page asks for them by HTTP basic auth; every state-changing action is a POST carrying the console's CSRF
token, since a browser sends basic-auth credentials along with a request another site makes it send; and
a request must name the console by an IP address, ``localhost`` or an allowed host name (its Host header),
so that a site whose name is re-pointed at 127.0.0.1 (DNS rebinding) cannot read the pages and the token.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import ipaddress
import re
import secrets
import time
from collections.abc import Awaitable, Callable
from datetime import datetime
from urllib.parse import quote

from tidalmq.acl.signature import SessionCredentials
from tidalmq.client.message import MessageExt
from tidalmq.common.naming import NameError_, is_system_topic
from tidalmq.common.top_addressing import FETCH_INTERVAL_S
from tidalmq.console import pages as P
from tidalmq.console.cluster_admin import ClusterAdmin, UnlistedAddress
from tidalmq.console.http import HttpError, HttpServer, Request, Response
from tidalmq.remoting.codes import ResponseCode
from tidalmq.remoting.tls import TlsOption
from tidalmq.remoting.transport import RemotingError

# Runtime-info keys shown on the cluster page: the broker's role and replication state (HA, controller).
CLUSTER_KEYS = ("brokerRole", "commitLogMinOffset", "commitLogMaxOffset", "msgPutTotalTodayNow",
                "connectionCount", "bootTimestamp")
# The replication keys of the runtime info: RocketMQ's HA (haConnections, haMasterAddress, haSlave0 ...) and
# controller mode's (controllerMasterEpoch, controllerSyncStateSet ...).
REPLICATION_KEY = re.compile(r"^(ha[A-Z0-9]|controller)")

Page = Callable[[Request], Awaitable[Response]]


class ConsoleServer:
    """``await ConsoleServer("127.0.0.1", 8082, "127.0.0.1:9876").start()``; ``port`` names the bound port."""

    def __init__(self, host: str, port: int, namesrv_addr: str, credentials: SessionCredentials | None = None,
                 *, tls: TlsOption = None, allowed_hosts: tuple[str, ...] = (), namesrv_domain: str | None = None,
                 namesrv_domain_subgroup: str | None = None, fetch_interval: float = FETCH_INTERVAL_S) -> None:
        # requests go only to the NameServers and the brokers they list (cluster_admin.py); with no address
        # but an address server, the list is asked of it and asked again (cluster_admin.py)
        self.admin = ClusterAdmin(namesrv_addr, credentials=credentials, tls=tls, namesrv_domain=namesrv_domain,
                                  namesrv_domain_subgroup=namesrv_domain_subgroup, fetch_interval=fetch_interval)
        self.credentials = credentials
        self.allowed_hosts = {h.strip().lower() for h in allowed_hosts if h.strip()} | {"localhost"}
        self.csrf = secrets.token_urlsafe(32)  # per process: a page shows it, another site cannot read it
        self.http = HttpServer(host, port, self.handle)
        self.gets: dict[str, Page] = {"/": self.cluster, "/topics": self.topics, "/groups": self.groups,
                                      "/messages": self.messages, "/dlq": self.dlq, "/schedule": self.schedule}
        self.posts: dict[str, Callable[[Request], Awaitable[tuple[str, str, Page]]]] = {
            "/topics/create": self.create_topic, "/topics/delete": self.delete_topic,
            "/dlq/resend": self.resend, "/schedule/cancel": self.cancel, "/schedule/reschedule": self.reschedule}

    @property
    def port(self) -> int:
        return self.http.port

    async def start(self) -> None:
        await self.http.start()

    async def stop(self) -> None:
        await self.http.stop()
        await self.admin.close()

    # dispatch -----------------------------------------------------------------------------------
    def _check_login(self, req: Request) -> None:
        if self.credentials is None:
            return
        scheme, _, value = req.headers.get("authorization", "").partition(" ")
        try:
            user, _, password = base64.b64decode(value, validate=True).decode("utf-8").partition(":")
        except (binascii.Error, UnicodeDecodeError):
            user = password = ""
        # compare both, always, in constant time: the answer must not tell which one was wrong
        ok_user = hmac.compare_digest(user.encode(), self.credentials.access_key.encode())
        ok_password = hmac.compare_digest(password.encode(), self.credentials.secret_key.encode())
        if scheme.lower() != "basic" or not (ok_user and ok_password):
            raise HttpError(401, "login required: the console's accessKey and secretKey",
                            {"WWW-Authenticate": 'Basic realm="TidalMQ console", charset="UTF-8"'})

    def _check_host(self, req: Request) -> None:
        host = req.headers.get("host", "")
        name = host[1:].partition("]")[0] if host.startswith("[") else host.rpartition(":")[0] or host
        try:
            ipaddress.ip_address(name)
            return
        except ValueError:
            pass
        if name.lower() not in self.allowed_hosts:
            raise HttpError(421, f"this console answers to IP addresses, localhost and consoleAllowedHosts, "
                                 f"not {name!r} (docs/console.md)")

    async def handle(self, req: Request) -> Response:
        self._check_host(req)
        self._check_login(req)
        try:
            return await self._dispatch(req)
        except NameError_ as e:  # a topic or group name from the request that RocketMQ's rules refuse
            return Response(P.layout(req.path, "Bad request", "", error=str(e)), 400)
        except RemotingError as e:  # a NameServer or broker that does not answer: say so, keep serving
            return Response(P.layout(req.path, "No answer", "", error=_error_text(e)), 502)

    async def _dispatch(self, req: Request) -> Response:
        if req.method == "GET":
            page = self.gets.get(req.path)
            if page is None:
                raise HttpError(404, "no such page")
            return await page(req)
        if req.method == "POST":
            action = self.posts.get(req.path)
            if action is None:
                raise HttpError(404, "no such action")
            if not hmac.compare_digest(req.arg("csrf").encode(), self.csrf.encode()):
                raise HttpError(403, "missing or wrong CSRF token: reload the page and try again")
            bad_input = False
            try:
                notice, error, page = await action(req)
            except (RemotingError, ValueError) as e:  # ValueError: the form's own values (names, numbers)
                bad_input = not isinstance(e, RemotingError)
                notice, error, page = "", _error_text(e), self.gets.get(req.path.rsplit("/", 1)[0], self.cluster)
            resp = await page(req)
            # the page after the action, with what it did above (the page's own error, if any, stays below)
            resp.body = resp.body.replace("</h2>", "</h2>" + P.flash(notice, error), 1)
            if bad_input:
                resp.status = 400
            return resp
        raise HttpError(405, "GET or POST only", {"Allow": "GET, POST"})

    def _page(self, req: Request, title: str, content: str, error: str = "") -> Response:
        return Response(P.layout(req.path, title, content, error=error))

    # cluster ------------------------------------------------------------------------------------
    async def cluster(self, req: Request) -> Response:
        info = await self.admin.cluster_info()
        rows = []
        for cluster, names in sorted(info.get("clusterAddrTable", {}).items()):
            for name in sorted(names):
                addrs = (info.get("brokerAddrTable", {}).get(name) or {}).get("brokerAddrs") or {}
                for bid, addr in sorted(addrs.items(), key=lambda kv: int(kv[0])):
                    try:
                        rt = await self.admin.broker_runtime_info(addr)
                    except RemotingError as e:
                        rt = {"error": _error_text(e)}
                    shown = [P.esc(rt.get(k, "")) if k != "bootTimestamp" else P.when(rt.get(k)) for k in CLUSTER_KEYS]
                    repl = {k: v for k, v in rt.items() if REPLICATION_KEY.match(k)}
                    if "error" in rt:
                        repl["error"] = rt["error"]
                    rows.append([P.esc(cluster), P.esc(name), P.esc(bid), P.esc(addr), *shown, P.properties(repl)])
        header = ["Cluster", "Broker", "Id", "Address", "Role", "CommitLog min", "CommitLog max", "Put today",
                  "Connections", "Started", "Replication"]
        return self._page(req, "Cluster and replication", P.table(header, rows, "cluster"))

    # topics -------------------------------------------------------------------------------------
    async def topics(self, req: Request) -> Response:
        rows = []
        for topic in await self.admin.topic_list():
            delete = ("<small>system</small>" if is_system_topic(topic)
                      else P.post_form("/topics/delete", self.csrf, P.hidden("topic", topic), "Delete"))
            rows.append([f'<a href="/messages?topic={_q(topic)}">{P.esc(topic)}</a>', delete])
        create = P.post_form("/topics/create", self.csrf,
                             '<input name="topic" id="new-topic" placeholder="topic" required> '
                             '<input name="queues" type="number" min="1" max="1024" value="8" title="queues">',
                             "Create topic", "create-topic")
        return self._page(req, "Topics", f"<fieldset>{create}</fieldset>" + P.table(["Topic", ""], rows, "topics"))

    async def create_topic(self, req: Request) -> tuple[str, str, Page]:
        topic, queues = req.arg("topic"), _int(req.arg("queues", "8"), "queues")
        brokers = await self.admin.create_topic(topic, queues)
        return f"topic {topic} created on {', '.join(brokers)} with {queues} queues", "", self.topics

    async def delete_topic(self, req: Request) -> tuple[str, str, Page]:
        topic = req.arg("topic")
        if is_system_topic(topic):  # the broker's own (TBW102, the timer's, the transactions' ...)
            raise ValueError(f"{topic} is a system topic: the console does not delete it")
        await self.admin.delete_topic(topic)
        return f"topic {topic} deleted", "", self.topics

    # groups -------------------------------------------------------------------------------------
    async def groups(self, req: Request) -> Response:
        rows = []
        for group, cfg in (await self.admin.group_list()).items():
            try:
                progress = await self.admin.consumer_progress(group)
                online = len(await self.admin.consumer_connections(group))
                lag, topics = str(sum(p.lag for p in progress)), sorted({p.topic for p in progress})
            except RemotingError as e:
                lag, topics, online = _error_text(e), [], 0
            rows.append([f'<a href="/dlq?group={_q(group)}">{P.esc(group)}</a>', P.esc(" ".join(topics)),
                         str(online), P.esc(lag), P.esc(cfg.get("retryMaxTimes", ""))])
        header = ["Group", "Topics", "Consumers online", "Lag", "Max retries"]
        return self._page(req, "Consumer groups", P.table(header, rows, "groups"))

    # messages -----------------------------------------------------------------------------------
    async def messages(self, req: Request) -> Response:
        topic, key, msg_id = req.arg("topic"), req.arg("key"), req.arg("id")
        begin, end = req.arg("begin"), req.arg("end")
        form = (
            f'<form method="get" action="/messages" id="by-key">Topic <input name="topic" value="{P.esc(topic)}"> '
            f'Key <input name="key" id="key" value="{P.esc(key)}"> <button>Find by key</button></form>'
            '<form method="get" action="/messages" id="by-id">Message id <input name="id" size=34> '
            f'Topic (for a client id) <input name="topic" value="{P.esc(topic)}"> <button>Find by id</button></form>'
            f'<form method="get" action="/messages" id="by-time">Topic <input name="topic" value="{P.esc(topic)}"> '
            'From <input name="begin" type="datetime-local" step="1"> to <input name="end" type="datetime-local" '
            'step="1"> <button>Find by time</button></form>')
        found: list[MessageExt] | None = None
        error, status = "", 200
        try:
            if msg_id:
                found = [await self.admin.view_message(msg_id, topic or None)]
            elif topic and key:
                found = await self.admin.query_messages_by_key(topic, key, 64)
            elif topic and (begin or end):
                end_ms = _time_ms(end, "end") if end else int(time.time() * 1000)
                found = await self.admin.messages_by_time(topic, _time_ms(begin, "begin") if begin else 0, end_ms)
            elif topic:
                found = await self.admin.messages_by_time(topic, int(time.time() * 1000) - 3_600_000,
                                                          int(time.time() * 1000))
        except UnlistedAddress as e:  # an offset id naming a host:port the cluster does not list
            error, status = f"message id {msg_id} points at {e.addr}, which is not a broker of this cluster: " \
                            "the console does not connect there (a client id is looked up with its topic)", 404
        except RemotingError as e:
            error = _error_text(e)
            if msg_id and e.code == ResponseCode.QUERY_NOT_FOUND:
                status = 404
        except ValueError as e:  # a begin or end that is not a date and time
            error, status = _error_text(e), 400
        shown = f"<fieldset>{form}</fieldset>" + (P.messages(found) if found is not None else "")
        resp = self._page(req, "Messages", shown, error)
        resp.status = status
        return resp

    # dead letters -------------------------------------------------------------------------------
    async def dlq(self, req: Request) -> Response:
        group = req.arg("group")
        form = (f'<form method="get" action="/dlq" id="dlq-group">Group <input name="group" value="{P.esc(group)}"> '
                "<button>Show dead letters</button></form>")
        content = f"<fieldset>{form}</fieldset>"
        error = ""
        if group:
            try:
                letters = await self.admin.dead_letters(group, 200)
            except RemotingError as e:
                letters, error = [], _error_text(e)
            actions = {m.offset_msg_id: P.post_form("/dlq/resend", self.csrf, P.hidden("group", group)
                                                    + P.hidden("id", m.offset_msg_id), "Resend")
                       for m in letters}
            if letters:
                content += P.post_form("/dlq/resend", self.csrf, P.hidden("group", group) + P.hidden("all", "1"),
                                       f"Resend all {len(letters)}")
            content += P.messages(letters, actions)
        return self._page(req, "Dead letters", content, error)

    async def resend(self, req: Request) -> tuple[str, str, Page]:
        group = req.arg("group")
        ids = None if req.arg("all") else [i.strip() for i in req.form.get("id", []) if i.strip()]
        if ids == []:
            raise ValueError("no dead letter chosen")
        sent = await self.admin.resend_dead_letters(group, ids)
        return (f"re-sent {len(sent)} dead letter(s) of {group} to their topic: "
                + ", ".join(f"{old} as {new}" for old, new in sent)), "", self.dlq

    # scheduled messages -------------------------------------------------------------------------
    async def schedule(self, req: Request) -> Response:
        topic, key = req.arg("topic"), req.arg("key")
        stats = await self.admin.schedule_stats()
        rows = []
        for broker, report in stats.items():
            buckets = report.get("histogramBuckets") or []
            for name, t in (report.get("topics") or {}).items():
                rows.append([P.esc(broker), f'<a href="/schedule?topic={_q(name)}">{P.esc(name)}</a>',
                             str(t.get("pending", 0)), str(t.get("delayLevel", 0)), str(t.get("timer", 0)),
                             P.histogram(t.get("histogram") or {}, buckets)])
        content = P.table(["Broker", "Topic", "Pending", "Delay levels", "Timer", "Deliver time"], rows, "schedule")
        content += ('<fieldset><form method="get" action="/schedule" id="scheduled-search">Topic '
                    f'<input name="topic" value="{P.esc(topic)}"> Key or message id <input name="key" '
                    f'value="{P.esc(key)}"> <button>Search scheduled</button></form></fieldset>')
        error = ""
        if topic and key:
            try:
                found = await self.admin.scheduled_messages(topic, key)
            except RemotingError as e:
                found, error = [], _error_text(e)
            actions = {}
            for m in found:
                uniq = m.properties.get("UNIQ_KEY", "")
                if not uniq:
                    continue
                ids = P.hidden("topic", topic) + P.hidden("key", key) + P.hidden("uniq_key", uniq)
                # A timer message can be cancelled (delay levels cannot); any scheduled one moved (RESCHEDULE_MESSAGE).
                cancel = P.post_form("/schedule/cancel", self.csrf, ids, "Cancel") if "DELAY" not in m.properties else ""
                actions[m.offset_msg_id] = cancel + P.post_form(
                    "/schedule/reschedule", self.csrf, ids + ' deliver in <input name="delay_s" value="0" size="6"> s ',
                    "Reschedule")
            content += P.messages(found, actions)
        return self._page(req, "Scheduled messages", content, error)

    async def cancel(self, req: Request) -> tuple[str, str, Page]:
        topic, uniq = req.arg("topic"), req.arg("uniq_key")
        broker = await self.admin.cancel_scheduled(topic, uniq)
        return f"scheduled message {uniq} of {topic} cancelled on {broker}", "", self.schedule

    async def reschedule(self, req: Request) -> tuple[str, str, Page]:
        topic, uniq = req.arg("topic"), req.arg("uniq_key")
        delay_s = float(req.arg("delay_s") or "0")  # ValueError: the form's own value
        if not delay_s >= 0:
            raise ValueError(f"the delay must be a number of seconds, at least 0, not {req.arg('delay_s')!r}")
        r = await self.admin.reschedule(topic, uniq, delay_ms=int(delay_s * 1000))
        return (f"scheduled message {uniq} of {topic} on {r.broker_name} moved from {P.when(r.previous_deliver_time_ms)} "
                f"to {P.when(r.deliver_time_ms)}"), "", self.schedule


def _error_text(e: Exception) -> str:
    if isinstance(e, UnlistedAddress):
        return e.remark or ""
    if isinstance(e, RemotingError):
        return f"refused (code {e.code}): {e.remark or ''}"
    return str(e) or type(e).__name__


def _q(value: str) -> str:
    """A value for a link's query string."""
    return P.esc(quote(value, safe=""))


def _int(text: str, what: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"{what} must be a whole number, not {_shown(text)}") from None


def _time_ms(text: str, what: str) -> int:
    """A ``datetime-local`` value (the console host's local time) as ms since the epoch."""
    try:
        return int(datetime.fromisoformat(text).timestamp() * 1000)
    except ValueError:
        raise ValueError(f"{what} must be a date and time like 2026-11-21T10:00:00, not {_shown(text)}") from None


def _shown(text: str, limit: int = 40) -> str:
    """A value the visitor sent, quoted and cut short for an error line."""
    return repr(text if len(text) <= limit else text[:limit] + "...")

"""PlainAccessValidator: checks each request against the loaded ACL, and reloads it when its files
change (RocketMQ's FileWatchService polls every 500 ms; so does this, off the event loop).

A refused request is answered as RocketMQ answers an AclException thrown by its server RPC hook:
SYSTEM_ERROR, remark ``org.apache.rocketmq.acl.common.AclException: <why>``; the processor never runs.

The order of the checks is RocketMQ's (PlainPermissionManager.validate, PlainPermissionChecker):
a globally white address passes; else the request must name a known AccessKey; an address white for
that account passes; else the signature must be right; an admin account may do anything; admin codes
need an admin; every topic and group the request touches needs the permission it asks for.
"""

from __future__ import annotations

import asyncio
import binascii
import hmac
import logging
import os
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from tidalmq.acl.address import IP, parse_host
from tidalmq.acl.config import Account, AclConfigError, PlainAcl, load_acl
from tidalmq.acl.permission import PUB, check_permission
from tidalmq.acl.resources import RESOURCE_FIELDS, ResourceError, request_resources, resource_key
from tidalmq.acl.signature import ACCESS_KEY, SIGNATURE, SIGNED_VALUES_BY_COUNT, UNIQUE_MSG_QUERY_FLAG
from tidalmq.acl.signature_worker import SignatureWorker
from tidalmq.common.naming import RETRY_GROUP_TOPIC_PREFIX
from tidalmq.remoting.codes import ResponseCode
from tidalmq.remoting.command import FLAG_RESPONSE, RemotingCommand
from tidalmq.remoting.transport import Connection

log = logging.getLogger(__name__)

ACL_EXCEPTION = "org.apache.rocketmq.acl.common.AclException"
RMQ_SYS_TRACE_TOPIC = "RMQ_SYS_TRACE_TOPIC"
WATCH_INTERVAL_S = 0.5
_CONN_KEY = "acl"  # per connection: its _Peer
_DECISIONS_MAX = 256  # per connection
_UNDECIDED = object()
_REFUSALS_LOGGED_MAX = 1000
# judge_later hands a chunk to the signature worker when its requests average this many bytes of frame:
# for small requests (1 KiB single sends) the hand-over costs the loop more than it saves (the child wakes on
# the loop's shared cores); for batches (64 messages of 1 KiB, 70 KB a request) it saves (docs/acl.md,
# "Cost"; docs/benchmarks.md, "Figures behind the code").
_LATER_MIN_BYTES_PER_REQUEST = 16 * 1024

FileSignature = tuple[tuple[str, int, int, int, int], ...]


def _file_signature(paths: Iterable[Path]) -> FileSignature:
    out = []
    for p in paths:
        try:
            st = os.stat(p)
        except OSError:
            continue
        out.append((str(p), st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns))
    return tuple(out)


class PlainAccessValidator:
    """Call it with (connection, request): None to let the request through, a response to refuse it.

    ``locate`` lists the ACL files (called again on every poll: files may come and go in conf/acl/).
    ``check_codes`` None checks every request (the broker); a set checks only those codes (the
    NameServer, whose reads stay open). ``admin_codes`` need an admin account. ``extra_accounts``
    are added to what the files say (the standalone broker's own account at its NameServer).
    """

    def __init__(self, locate: Callable[[], list[Path]], *, admin_codes: frozenset[int],
                 check_codes: frozenset[int] | None = None, extra_accounts: Iterable[Account] = (),
                 white_needs_admin: bool = False) -> None:
        self._locate = locate
        self.admin_codes = admin_codes
        # The NameServer's: an account's whiteRemoteAddress spares its signature, never the need to be an
        # admin for an admin code (the broker's stays RocketMQ's: an account-white address passes).
        self.white_needs_admin = white_needs_admin
        self.check_codes = check_codes
        self._extra = tuple(extra_accounts)
        self.acl = PlainAcl((), {})
        self._signature: FileSignature = ()
        self.reloads = 0
        self._logged: set[tuple[str, str]] = set()
        self._worker: SignatureWorker | None = None

    # loading ----------------------------------------------------------------------------------
    def load(self) -> None:
        """Load now; raises AclConfigError (at start-up a broken ACL is fatal)."""
        paths = self._locate()
        sig = _file_signature(paths)
        self.acl = load_acl(paths, self._extra)
        self._signature = sig
        if not self.acl.files:
            log.warning("ACL is on but none of %s exists: only globally white addresses would pass, "
                        "and there are none", ", ".join(map(str, paths)))
        log.info("ACL loaded from %s: %d accounts, %d global white patterns", ", ".join(self.acl.files) or "-",
                 len(self.acl.accounts), len(self.acl.global_white))

    def reload_if_changed(self) -> bool:
        """One poll: reload when a file changed, appeared or went away. A broken file keeps the
        previous ACL (and is tried again when it changes next)."""
        paths = self._locate()
        sig = _file_signature(paths)
        if sig == self._signature:
            return False
        self._signature = sig
        try:
            acl = load_acl(paths, self._extra)
        except AclConfigError as e:
            log.error("ACL not reloaded, the previous one stays in force: %s", e)
            return False
        self.acl = acl
        self.reloads += 1
        log.info("ACL reloaded from %s: %d accounts, %d global white patterns", ", ".join(acl.files) or "-",
                 len(acl.accounts), len(acl.global_white))
        return True

    async def watch(self, interval: float = WATCH_INTERVAL_S) -> None:
        while True:
            await asyncio.sleep(interval)
            try:
                await asyncio.to_thread(self.reload_if_changed)
            except Exception:
                log.exception("ACL watch failed")

    # checking ---------------------------------------------------------------------------------
    def __call__(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand | None:
        if self.check_codes is not None and cmd.code not in self.check_codes:
            return None
        peer = self._peer(conn)
        if peer.white:
            return None
        why = self._refusal(peer, cmd)
        if why is None:
            return None
        key = (conn.remote[0], why)
        if key not in self._logged and len(self._logged) < _REFUSALS_LOGGED_MAX:
            self._logged.add(key)
            log.warning("ACL refused request code %s from %s: %s", cmd.code, conn.addr, why)
        return cmd.make_response(ResponseCode.SYSTEM_ERROR, f"{ACL_EXCEPTION}: {why}")

    def judge_many(self, conn: Connection, cmds: list[RemotingCommand],
                   ) -> list[tuple[RemotingCommand, RemotingCommand | None] | None]:
        """``self(conn, cmd)`` for each of a connection's requests read together, in order: (request,
        refusal or None), or None for a response and where the check failed (the server asks again at
        dispatch). A request signed by the account the connection last signed as, touching what that
        account was already let touch (a client's steady stream), is checked inline: its signature (the
        steps of ``Hmac.verify``, without its three calls), then its resources among the connection's
        decisions; anything else, or anything that inline check cannot read, takes ``self(conn, cmd)``.
        Same verdicts (tests/acl/test_units.py::test_a_chunk_is_judged_as_its_requests_one_at_a_time),
        for less than one call each (docs/benchmarks.md#security)."""
        codes = self.check_codes
        peer = self._peer(conn)
        if peer.white:
            return [None if c.is_response else (c, None) for c in cmds]
        by_count = SIGNED_VALUES_BY_COUNT
        fields_of = RESOURCE_FIELDS
        b2a, same = binascii.b2a_base64, hmac.compare_digest
        ak, copiers, decided = self._steady(peer)
        inner_copy, outer_copy = copiers or (None, None)
        out: list[tuple[RemotingCommand, RemotingCommand | None] | None] = []
        append = out.append
        for cmd in cmds:
            if cmd.flag & FLAG_RESPONSE:
                append(None)
                continue
            ext = cmd.ext_fields
            try:
                if (inner_copy is not None and ext.get(ACCESS_KEY) == ak and (codes is None or cmd.code in codes)
                        and (sig := ext.get(SIGNATURE)) is not None
                        and (values := by_count.get(len(ext) - 1 - (UNIQUE_MSG_QUERY_FLAG in ext))) is not None):
                    inner = inner_copy()
                    inner.update("".join(values(ext)).encode("utf-8"))
                    if (body := cmd.body) is not None:
                        inner.update(body)
                    outer = outer_copy()  # type: ignore[misc]  # set together with inner_copy
                    outer.update(inner.digest())
                    if same(b2a(outer.digest(), newline=False), sig.encode("ascii")):
                        code = cmd.code
                        fields = fields_of.get(code)
                        rk = ((code, ext.get(fields[0])) if fields is not None and len(fields) == 1
                              else resource_key(cmd))
                        if rk is not None and decided.get(rk, _UNDECIDED) is None:
                            append((cmd, None))
                            continue
            except Exception:  # noqa: S110 - a key set of that count but other keys, text no utf-8 ...
                pass  # ... the full check reads it again, and answers it
            try:
                append((cmd, self(conn, cmd)))
            except Exception:
                append(None)
            # the full check may have met another account, a new decision or a reloaded ACL
            peer = self._peer(conn)
            ak, copiers, decided = self._steady(peer)
            inner_copy, outer_copy = copiers or (None, None)
        return out

    def use_worker(self, worker: SignatureWorker | None) -> None:
        """Check the signatures of large chunks in ``worker``'s process (judge_later); None: all inline."""
        self._worker = worker

    def judge_later(self, conn: Connection, cmds: list[RemotingCommand], frames: memoryview,
                    deliver: Callable[[list[tuple[RemotingCommand, RemotingCommand | None] | None]], None],
                    ) -> bool:
        """``judge_many`` of a chunk, with the signatures checked in the signature worker's process while
        the event loop goes on: True if the chunk was taken (``deliver`` gets its verdicts later, on the
        loop), False to judge it now. Taken only from a connection already signing steadily as one account
        (judge_many's inline case), and only a chunk of large requests, whose hashes cost the loop more
        than the hand-over (_LATER_MIN_BYTES_PER_REQUEST). The worker only says which
        requests carry that account's signature; the permissions, and every request it did not pass, are
        judged here as judge_many judges them, so the verdicts are judge_many's."""
        worker = self._worker
        if worker is None or len(frames) < _LATER_MIN_BYTES_PER_REQUEST * len(cmds):
            return False
        peer = self._peer(conn)
        ak = peer.access_key
        if peer.white or peer.account is None or peer.account_white or ak is None:
            return False
        acl = self.acl
        return worker.submit(acl, lambda: {a.access_key: a.secret_key for a in acl.accounts.values()}, ak, frames,
                             lambda signed: deliver(self._judged_after(conn, cmds, signed, acl, ak)))

    def _judged_after(self, conn: Connection, cmds: list[RemotingCommand], signed: bytes | None, acl: PlainAcl,
                      ak: str) -> list[tuple[RemotingCommand, RemotingCommand | None] | None]:
        """The verdicts on a chunk the worker checked: ``signed`` has a byte a request, 1 where it carries
        ``ak``'s signature under ``acl``; None (the worker failed), another ACL loaded since or another
        account signed in between: the whole chunk as judge_many judges it."""
        peer = self._peer(conn)
        if signed is None or peer.acl is not acl or peer.access_key != ak or peer.account_white:
            return self.judge_many(conn, cmds)
        codes = self.check_codes
        fields_of = RESOURCE_FIELDS
        decided = peer.decided
        out: list[tuple[RemotingCommand, RemotingCommand | None] | None] = []
        append = out.append
        n = len(signed)
        for i, cmd in enumerate(cmds):
            if cmd.flag & FLAG_RESPONSE:
                append(None)
                continue
            try:
                if i < n and signed[i] and peer.access_key == ak and (codes is None or cmd.code in codes):
                    code = cmd.code
                    fields = fields_of.get(code)
                    rk = ((code, cmd.ext_fields.get(fields[0])) if fields is not None and len(fields) == 1
                          else resource_key(cmd))
                    if rk is not None and decided.get(rk, _UNDECIDED) is None:
                        append((cmd, None))
                        continue
            except Exception:  # noqa: S110 - the full check reads it again, and answers it
                pass
            try:
                append((cmd, self(conn, cmd)))
            except Exception:
                append(None)
            peer = self._peer(conn)  # the full check may have met another account or a reloaded ACL
            decided = peer.decided
            if peer.acl is not acl:
                ak = ""  # nothing more passes on the worker's word
        return out

    @staticmethod
    def _steady(peer: _Peer) -> tuple[str | None, tuple[Callable[[], Any], Callable[[], Any]] | None,
                                      dict[tuple[int | str | None, ...], str | None]]:
        """What judge_many's inline check needs of a connection: the access key it last signed with, that
        account's HMAC state copiers (None when there is no account yet, or its address is white for it:
        then the full check decides), and the decisions taken for it."""
        account = peer.account
        copiers = account.mac.state_copiers() if account is not None and not peer.account_white else None
        return peer.access_key, copiers, peer.decided

    def _peer(self, conn: Connection) -> _Peer:
        peer: _Peer | None = conn.attributes.get(_CONN_KEY)
        if peer is None or peer.acl is not self.acl:
            peer = conn.attributes[_CONN_KEY] = _Peer(self.acl, parse_host(conn.remote[0]))
        return peer

    def _refusal(self, peer: _Peer, cmd: RemotingCommand) -> str | None:
        """Why ``cmd`` may not pass (global white addresses aside), or None if it may."""
        ext = cmd.ext_fields
        ak = ext.get(ACCESS_KEY)
        if ak is None:
            return "No accessKey is configured"
        owned = peer.account
        if owned is None or ak != peer.access_key:
            owned = peer.acl.accounts.get(ak)
            if owned is None:
                return f"No acl config for {ak}"
            peer.signed_as(ak, owned)
        if peer.account_white:
            if self.white_needs_admin and not owned.admin and cmd.code in self.admin_codes:
                return _need_admin(cmd.code, owned)
            return None
        sig = ext.get(SIGNATURE)
        if sig is None or not owned.mac.verify(ext, cmd.body, sig):
            return f"Check signature failed for accessKey={ak}"
        # What follows depends on the account and the request's code and resources alone (resource_key):
        # decided once per connection, account and loaded ACL (a reload brings a new PlainAcl, hence a new
        # _Peer), then looked up.
        rk = resource_key(cmd)
        if rk is None:
            return self._decide(owned, cmd)
        decided = peer.decided
        why = decided.get(rk, _UNDECIDED)
        if why is _UNDECIDED:
            why = self._decide(owned, cmd)
            if len(decided) >= _DECISIONS_MAX:  # a client naming ever new topics gains nothing
                decided.clear()
            decided[rk] = why
        return why  # type: ignore[return-value]

    def _decide(self, owned: Account, cmd: RemotingCommand) -> str | None:
        """The admin and permission checks, for a signed request of ``owned``."""
        if owned.admin:
            return None
        if cmd.code in self.admin_codes:
            return _need_admin(cmd.code, owned)
        try:
            needed = request_resources(cmd)
        except ResourceError as e:
            return str(e)
        return _lacking(owned, needed)

    def check_signed(self, ip_text: str, access_key: str | None, signed: Callable[[Account], bool],
                     needed: Mapping[str, int]) -> tuple[bool, str] | None:
        """The same checks, in the same order, for a request that is no RemotingCommand (the gRPC
        endpoint's): ``signed`` says whether the request carries the account's signature, ``needed``
        what it touches. None: it may pass; else (authenticated, why): whether it failed on who asks
        (False: unknown account or bad signature) or on what the account may do (True)."""
        acl = self.acl
        ip = parse_host(ip_text)
        if any(p.matches(ip) for p in acl.global_white):
            return None
        if not access_key:
            return False, "No accessKey is configured"
        owned = acl.accounts.get(access_key)
        if owned is None:
            return False, f"No acl config for {access_key}"
        if owned.white.matches(ip):
            return None
        if not signed(owned):
            return False, f"Check signature failed for accessKey={access_key}"
        if owned.admin:
            return None
        why = _lacking(owned, needed)
        return None if why is None else (True, why)

    def add_accounts(self, accounts: Iterable[Account]) -> None:
        """Accounts known beside the files from now on (the standalone's internal identity), and
        load again with them (AclConfigError if the files are broken)."""
        self._extra = (*self._extra, *accounts)
        self.load()


def _need_admin(code: int, owned: Account) -> str:
    return f"Need admin permission for request code={code}, but accessKey={owned.access_key} is not"


def _lacking(owned: Account, needed: Mapping[str, int]) -> str | None:
    """Why ``owned`` (no admin) may not touch ``needed`` (resource -> permission), or None."""
    if needed.get(RMQ_SYS_TRACE_TOPIC) == PUB:  # message traces pass, as in RocketMQ
        return None
    perms = owned.perms
    for resource, perm in needed.items():
        is_group = resource.startswith(RETRY_GROUP_TOPIC_PREFIX)
        has = perms.get(resource)
        if has is None:
            if not check_permission(perm, owned.default_group_perm if is_group else owned.default_topic_perm):
                return f"No default permission for {_print(resource, is_group)}"
        elif not check_permission(perm, has):
            return f"No permission for {_print(resource, is_group)}"
    return None


class _Peer:
    """What the validator knows of one connection under one loaded ACL: its address, whether that is
    globally white, the last account it signed as (clients sign every request with one), and what that
    account may do (resource_key -> why refused, or None)."""

    __slots__ = ("acl", "ip", "white", "access_key", "account", "account_white", "decided")

    def __init__(self, acl: PlainAcl, ip: IP | None) -> None:
        self.acl = acl
        self.ip = ip
        self.white = any(p.matches(ip) for p in acl.global_white)
        self.access_key: str | None = None
        self.account: Account | None = None
        self.account_white = False
        self.decided: dict[tuple[int | str | None, ...], str | None] = {}

    def signed_as(self, access_key: str, account: Account) -> None:
        self.access_key, self.account, self.account_white = access_key, account, account.white.matches(self.ip)
        self.decided = {}


def _print(resource: str, is_group: bool) -> str:
    return f"group:{resource[len(RETRY_GROUP_TOPIC_PREFIX):]}" if is_group else f"topic:{resource}"

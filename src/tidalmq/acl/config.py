"""plain_acl.yml: where RocketMQ looks for it, and what it says (PlainPermissionManager.load).

Parsing builds everything a request check needs (address patterns, permission tables, the keyed HMAC
of each secret), so no YAML or string parsing is left for request time.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tidalmq.acl.address import AddressPattern, AddressPatternError, parse_pattern
from tidalmq.acl.permission import DENY, parse_perm
from tidalmq.acl.signature import Hmac
from tidalmq.common.naming import retry_topic

log = logging.getLogger(__name__)

DEFAULT_ACL_FILE = "conf/plain_acl.yml"
ACL_DIR = "conf/acl"
# AclConstants.ACCESS_KEY_MIN_LENGTH / SECRET_KEY_MIN_LENGTH: a key must be longer than this.
KEY_MIN_LENGTH = 6
_PERM_NAMES = ("PUB", "SUB", "PUB|SUB", "SUB|PUB", "DENY")


class AclConfigError(ValueError):
    """An ACL file that cannot be used; a reload that meets one keeps the previous ACL."""


@dataclass(frozen=True)
class Account:
    access_key: str
    secret_key: str = field(repr=False)
    white: AddressPattern
    admin: bool
    default_topic_perm: int
    default_group_perm: int
    # Topics by name, groups by their retry topic (%RETRY%group), as RocketMQ keys them.
    perms: dict[str, int]
    mac: Hmac = field(repr=False, compare=False)
    source: str = ""


@dataclass(frozen=True)
class PlainAcl:
    """One loaded ACL: every file merged. Immutable, so a reload swaps it whole."""

    global_white: tuple[AddressPattern, ...]
    accounts: dict[str, Account]
    files: tuple[str, ...] = ()


def make_account(entry: dict[str, Any], source: str = "") -> Account:
    """One entry of ``accounts:`` (PlainPermissionManager.buildPlainAccessResource)."""
    ak = _text(entry.get("accessKey"))
    sk = _text(entry.get("secretKey"))
    if not ak or not sk or len(ak) <= KEY_MIN_LENGTH or len(sk) <= KEY_MIN_LENGTH:
        raise AclConfigError(f"{source}: the accessKey={ak} and secretKey cannot be null and length should "
                             f"longer than {KEY_MIN_LENGTH}")
    perms: dict[str, int] = {}
    for key, is_topic in (("groupPerms", False), ("topicPerms", True)):
        for item in entry.get(key) or []:
            parts = [p.strip() for p in str(item).split("=") if p.strip()]
            if len(parts) != 2:
                raise AclConfigError(f"{source}: Parse resource permission failed for "
                                     f"{'topic' if is_topic else 'group'}:{item}")
            name, perm = parts
            perms[name if is_topic else retry_topic(name)] = _perm(perm, source, f"{key} {item}")
    try:
        white = parse_pattern(_text(entry.get("whiteRemoteAddress")))
    except AddressPatternError as e:
        raise AclConfigError(f"{source}: accessKey {ak}: {e}") from None
    return Account(
        access_key=ak, secret_key=sk, white=white, admin=_bool(entry.get("admin")),
        default_topic_perm=_perm(entry.get("defaultTopicPerm"), source, "defaultTopicPerm"),
        default_group_perm=_perm(entry.get("defaultGroupPerm"), source, "defaultGroupPerm"),
        perms=perms, mac=Hmac(sk), source=source,
    )


def parse_acl_document(doc: Any, source: str = "") -> tuple[list[AddressPattern], list[Account]]:
    """One file's globalWhiteRemoteAddresses and accounts; an empty file has neither."""
    if doc is None:
        return [], []
    if not isinstance(doc, dict):
        raise AclConfigError(f"{source}: expected a mapping at the top, found {type(doc).__name__}")
    white = []
    for item in _list(doc.get("globalWhiteRemoteAddresses"), source, "globalWhiteRemoteAddresses"):
        try:
            white.append(parse_pattern(_text(item)))
        except AddressPatternError as e:
            raise AclConfigError(f"{source}: globalWhiteRemoteAddresses: {e}") from None
    accounts = []
    for entry in _list(doc.get("accounts"), source, "accounts"):
        if not isinstance(entry, dict):
            raise AclConfigError(f"{source}: an entry of accounts is not a mapping: {entry!r}")
        accounts.append(make_account(entry, source))
    return white, accounts


def load_acl(paths: Iterable[str | Path], extra_accounts: Iterable[Account] = ()) -> PlainAcl:
    """Read and merge the files. An accessKey defined again in a later file is ignored (RocketMQ
    warns likewise). A missing file counts as empty; a file that cannot be read or parsed raises."""
    global_white: list[AddressPattern] = []
    accounts: dict[str, Account] = {a.access_key: a for a in extra_accounts}
    files = []
    for p in paths:
        path = str(p)
        try:
            text = Path(path).read_text(encoding="utf-8")
        except FileNotFoundError:
            continue
        except (OSError, UnicodeDecodeError) as e:
            raise AclConfigError(f"{path}: {e}") from None
        try:
            doc = yaml.safe_load(text)
        except yaml.YAMLError as e:
            raise AclConfigError(f"{path}: {e}") from None
        white, accts = parse_acl_document(doc, path)
        files.append(path)
        global_white += white
        for a in accts:
            if a.access_key in accounts:
                log.warning("the accessKey %s is repeated in multiple ACL files; %s ignores it", a.access_key, path)
                continue
            accounts[a.access_key] = a
    return PlainAcl(tuple(global_white), accounts, tuple(files))


def acl_files(home: str | Path, plain_file: str | None = None) -> list[Path]:
    """The files RocketMQ 4.9 reads: every .yml/.yaml under ``<home>/conf/acl/`` and the file named by
    ``rocketmq.acl.plain.file`` (default ``conf/plain_acl.yml``), relative to the home directory
    (RocketMQ's ROCKETMQ_HOME) unless absolute."""
    home = Path(home)
    out = []
    acl_dir = home / ACL_DIR
    if acl_dir.is_dir():
        for root, dirs, names in os.walk(acl_dir):
            dirs.sort()
            out += [Path(root) / n for n in sorted(names) if n.endswith((".yml", ".yaml"))]
    main = Path(plain_file) if plain_file and os.path.isabs(plain_file) else home / (plain_file or DEFAULT_ACL_FILE)
    main = Path(os.path.normpath(main))
    if main not in out:
        out.append(main)
    return out


def _text(v: Any) -> str | None:
    # YAML reads 12345678 as a number and an empty value as null; RocketMQ's loader turns them to strings.
    if v is None:
        return None
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v).strip()


def _bool(v: Any) -> bool:
    return v is True or (isinstance(v, str) and v.strip().lower() == "true")


def _list(v: Any, source: str, key: str) -> list[Any]:
    if v is None:
        return []
    if not isinstance(v, list):
        raise AclConfigError(f"{source}: {key} must be a list")
    return v


def _perm(v: Any, source: str, what: str) -> int:
    text = _text(v)
    if text is None:
        return DENY
    if text not in _PERM_NAMES:
        log.warning("%s: %s: %r is not one of %s; read as DENY", source, what, text, ", ".join(_PERM_NAMES))
    return parse_perm(text)

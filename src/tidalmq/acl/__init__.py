"""ACL 1.0 as RocketMQ has it: plain_acl.yml accounts, request signatures, per-request checks.

See docs/acl.md. ``signature`` is what clients need; ``validator`` is what servers install as their
RemotingServer's ``access_validator``.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from tidalmq.acl.address import NOTHING
from tidalmq.acl.config import Account, AclConfigError, acl_files, load_acl
from tidalmq.acl.permission import BROKER_ADMIN_CODES, NAMESRV_ADMIN_CODES, PUB, SUB
from tidalmq.acl.signature import Hmac, RequestSigner, SessionCredentials
from tidalmq.acl.validator import PlainAccessValidator

__all__ = [
    "Account", "AclConfigError", "PlainAccessValidator", "RequestSigner", "SessionCredentials",
    "acl_files", "acl_home", "broker_validator", "internal_account", "load_acl", "namesrv_validator",
    "tools_credentials",
]


def acl_home(data_dir: str | Path) -> Path:
    """Where conf/plain_acl.yml and conf/acl/ are looked for: $ROCKETMQ_HOME, else the data directory."""
    return Path(os.environ.get("ROCKETMQ_HOME") or data_dir)


def broker_validator(home: str | Path, plain_file: str | None = None) -> PlainAccessValidator:
    """Every request to the broker is checked; loads now (AclConfigError if the files are broken)."""
    v = PlainAccessValidator(lambda: acl_files(home, plain_file), admin_codes=BROKER_ADMIN_CODES)
    v.load()
    return v


def namesrv_validator(home: str | Path, plain_file: str | None = None,
                      extra_accounts: tuple[Account, ...] = ()) -> PlainAccessValidator:
    """Only what changes routes or KV config is checked, and needs an admin (from an account's white
    address too); reads stay open."""
    v = PlainAccessValidator(lambda: acl_files(home, plain_file), admin_codes=NAMESRV_ADMIN_CODES,
                             check_codes=NAMESRV_ADMIN_CODES, extra_accounts=extra_accounts,
                             white_needs_admin=True)
    v.load()
    return v


def internal_account() -> tuple[Account, SessionCredentials]:
    """A fresh admin account known only inside this process: the standalone broker signs its
    NameServer calls with it when broker.conf gives it no accessKey/secretKey of its own."""
    creds = SessionCredentials("tidalmq-internal-" + secrets.token_hex(8), secrets.token_urlsafe(32))
    account = Account(access_key=creds.access_key, secret_key=creds.secret_key, white=NOTHING, admin=True,
                      default_topic_perm=PUB | SUB, default_group_perm=SUB, perms={},
                      mac=Hmac(creds.secret_key), source="(standalone)")
    return account, creds


def tools_credentials(home: str | Path) -> SessionCredentials | None:
    """The account of ``<home>/conf/tools.yml`` (accessKey, secretKey), as RocketMQ's tools and proxy read
    it; None when the file is missing or names no account. Raises ValueError when only one key is set."""
    path = Path(home) / "conf" / "tools.yml"
    if not path.is_file():
        return None
    import yaml

    doc = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    if not isinstance(doc, dict):
        return None
    ak, sk = doc.get("accessKey"), doc.get("secretKey")
    if ak is None and sk is None:
        return None
    if not ak or not sk:
        raise ValueError(f"{path}: an access key needs its secret key, and the other way round")
    return SessionCredentials(str(ak), str(sk))

"""TLS on the remoting ports, configured as RocketMQ's TlsSystemConfig / TlsHelper configure it.

Server modes (``tls.server.mode``), as NettyRemotingServer's HandshakeHandler tells them apart by the
first byte a client sends (0x16 opens a TLS handshake record):

- ``disabled``: plain only; a TLS handshake is refused.
- ``permissive``: plain and TLS on the same port.
- ``enforcing``: TLS only; a plain client is refused.

Unlike RocketMQ (whose default is ``permissive`` with a generated self-signed certificate,
``tls.test.mode.enable``), TidalMQ's default is ``disabled``: TLS needs a certificate and key.
Keys may also come from a properties file named by ``tls.config.file``; its values win, as in TlsHelper.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from pathlib import Path

from tidalmq.common.config import ConfigError, load_properties_file

TLS_HANDSHAKE_FIRST_BYTE = 0x16  # the content type of a TLS handshake record

MODES = ("disabled", "permissive", "enforcing")
CLIENT_AUTH = {"none": ssl.CERT_NONE, "optional": ssl.CERT_OPTIONAL, "require": ssl.CERT_REQUIRED}


@dataclass
class TlsConfig:
    server_mode: str = "disabled"
    server_need_client_auth: str = "none"
    server_key_path: str = ""
    server_key_password: str = ""
    server_cert_path: str = ""
    server_auth_client: bool = False
    server_trust_cert_path: str = ""
    # The client side: tidalmq's own outgoing connections (a broker to its NameServers) when enabled.
    enable: bool = False
    client_key_path: str = ""
    client_key_password: str = ""
    client_cert_path: str = ""
    client_auth_server: bool = False
    client_trust_cert_path: str = ""
    config_file: str = ""

    @property
    def server_enabled(self) -> bool:
        return self.server_mode != "disabled"


# RocketMQ's key -> field above.
KEYS = {
    "tls.server.mode": "server_mode",
    "tls.server.need.client.auth": "server_need_client_auth",
    "tls.server.keyPath": "server_key_path",
    "tls.server.keyPassword": "server_key_password",
    "tls.server.certPath": "server_cert_path",
    "tls.server.authClient": "server_auth_client",
    "tls.server.trustCertPath": "server_trust_cert_path",
    "tls.enable": "enable",
    "tls.client.keyPath": "client_key_path",
    "tls.client.keyPassword": "client_key_password",
    "tls.client.certPath": "client_cert_path",
    "tls.client.authServer": "client_auth_server",
    "tls.client.trustCertPath": "client_trust_cert_path",
    "tls.config.file": "config_file",
}


def is_tls_key(key: str) -> bool:
    return key.startswith("tls.")


def _set(cfg: TlsConfig, key: str, value: str) -> None:
    name = KEYS.get(key)
    if name is None:
        raise ConfigError(f"unknown TLS key {key} (known: {', '.join(sorted(KEYS))})")
    value = value.strip()
    if isinstance(getattr(cfg, name), bool):
        low = value.lower()
        if low not in ("true", "false"):
            raise ConfigError(f"{key}: expected true or false, got {value!r}")
        setattr(cfg, name, low == "true")
    else:
        setattr(cfg, name, value)


def tls_config(props: dict[str, str]) -> TlsConfig:
    """A TlsConfig from the ``tls.*`` keys of ``props`` (others are ignored), then ``tls.config.file``."""
    cfg = TlsConfig()
    for key, value in props.items():
        if is_tls_key(key):
            _set(cfg, key, value)
    if cfg.config_file:
        try:
            from_file = load_properties_file(cfg.config_file)
        except OSError as e:
            raise ConfigError(f"tls.config.file {cfg.config_file}: {e.strerror}") from None
        for key, value in from_file.items():
            if is_tls_key(key) and key != "tls.config.file":
                _set(cfg, key, value)
    cfg.server_mode = cfg.server_mode.lower()
    if cfg.server_mode not in MODES:
        raise ConfigError(f"tls.server.mode: expected one of {', '.join(MODES)}, got {cfg.server_mode!r}")
    cfg.server_need_client_auth = cfg.server_need_client_auth.lower()
    if cfg.server_need_client_auth not in CLIENT_AUTH:
        raise ConfigError(f"tls.server.need.client.auth: expected none, optional or require, "
                          f"got {cfg.server_need_client_auth!r}")
    return cfg


def _load_chain(ctx: ssl.SSLContext, cert: str, key: str, password: str, side: str) -> None:
    try:
        ctx.load_cert_chain(cert, key or None, password or None)
    except (OSError, ssl.SSLError) as e:
        raise ConfigError(f"tls.{side}.certPath/keyPath {cert} / {key}: {e}") from None


def _load_trust(ctx: ssl.SSLContext, path: str, key: str) -> None:
    try:
        ctx.load_verify_locations(cafile=path)
    except (OSError, ssl.SSLError) as e:
        raise ConfigError(f"{key} {path}: {e}") from None


def server_context(cfg: TlsConfig) -> ssl.SSLContext | None:
    """The server's SSLContext, or None when TLS is disabled."""
    if not cfg.server_enabled:
        return None
    if not cfg.server_cert_path or not Path(cfg.server_cert_path).is_file():
        raise ConfigError(f"tls.server.mode={cfg.server_mode} needs tls.server.certPath "
                          f"(a PEM certificate), got {cfg.server_cert_path!r}")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    _load_chain(ctx, cfg.server_cert_path, cfg.server_key_path, cfg.server_key_password, "server")
    ctx.verify_mode = CLIENT_AUTH[cfg.server_need_client_auth]
    if ctx.verify_mode != ssl.CERT_NONE:
        # Python's ssl verifies a client certificate it asks for: it cannot accept any certificate as
        # RocketMQ's authClient=false does, so asking for one needs the CA that signs them.
        if not cfg.server_trust_cert_path:
            raise ConfigError("tls.server.need.client.auth="
                              f"{cfg.server_need_client_auth} needs tls.server.trustCertPath")
        _load_trust(ctx, cfg.server_trust_cert_path, "tls.server.trustCertPath")
    elif cfg.server_auth_client and cfg.server_trust_cert_path:
        _load_trust(ctx, cfg.server_trust_cert_path, "tls.server.trustCertPath")
    return ctx


def client_context(*, trust_cert_path: str = "", auth_server: bool | None = None, cert_path: str = "",
                   key_path: str = "", key_password: str = "") -> ssl.SSLContext:
    """A client SSLContext. The server is verified when ``auth_server`` (by default: when a trust file
    is given) against ``trust_cert_path`` or the system's CAs. Host names are not checked: clients reach
    brokers by the IP addresses the NameServer hands out, as RocketMQ's clients do."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.check_hostname = False
    if auth_server is None:
        auth_server = bool(trust_cert_path)
    if auth_server:
        ctx.verify_mode = ssl.CERT_REQUIRED
        if trust_cert_path:
            _load_trust(ctx, trust_cert_path, "tls.client.trustCertPath")
        else:
            ctx.load_default_certs()
    else:
        ctx.verify_mode = ssl.CERT_NONE
    if cert_path:
        _load_chain(ctx, cert_path, key_path, key_password, "client")
    return ctx


def client_context_from(cfg: TlsConfig) -> ssl.SSLContext | None:
    """The context of a process's own outgoing connections: None unless ``tls.enable``."""
    if not cfg.enable:
        return None
    return client_context(trust_cert_path=cfg.client_trust_cert_path, auth_server=cfg.client_auth_server,
                          cert_path=cfg.client_cert_path, key_path=cfg.client_key_path,
                          key_password=cfg.client_key_password)



# What a tidalmq.client class accepts as its ``tls`` option.
TlsOption = bool | ssl.SSLContext | None


def resolve_client_tls(tls: TlsOption) -> ssl.SSLContext | None:
    """``tls=True``: encrypt without verifying the server, as RocketMQ's clients do by default
    (tls.client.authServer=false); an SSLContext (see ``client_context``): as it says; else plain."""
    if isinstance(tls, ssl.SSLContext):
        return tls
    return client_context() if tls else None

"""The NameServer address server's URL and answer, as RocketMQ's TopAddressing reads them, pure.

A client that is given no NameServer address asks a static HTTP server for the list instead:
``http://{rocketmq.namesrv.domain}:8080/rocketmq/{rocketmq.namesrv.domain.subgroup}`` (the domain may
carry its own port, then 8080 is not added), and gets ``host:port;host:port``. It asks again every two
minutes and applies a list that changed, so a NameServer cluster can move without restarting clients
(MixAll.getWSAddr, TopAddressing.fetchNSAddr, MQClientAPIImpl.fetchNameServerAddr).
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from tidalmq.common import naming

DEFAULT_DOMAIN = "jmenv.tbsite.net"
DEFAULT_SUBGROUP = "nsaddr"
DEFAULT_PORT = 8080
PATH_PREFIX = "/rocketmq/"
# The system properties the Java client reads, which non-Java clients (the Go client) read as
# environment variables of the same names.
DOMAIN_PROPERTY = "rocketmq.namesrv.domain"
SUBGROUP_PROPERTY = "rocketmq.namesrv.domain.subgroup"
NAMESRV_ADDR_PROPERTY = "rocketmq.namesrv.addr"
NAMESRV_ADDR_ENV = "NAMESRV_ADDR"
FETCH_INTERVAL_S = 120.0  # MQClientInstance's fetchNameServerAddr period
MAX_ANSWER_BYTES = 64 * 1024


class AddressServerError(ValueError):
    """An address server's URL or answer that cannot be used: the message says why."""


def ws_addr(domain: str, subgroup: str = DEFAULT_SUBGROUP, unit_name: str | None = None) -> str:
    """The address server's URL for ``domain`` (``host`` or ``host:port``) and ``subgroup``."""
    if not domain or any(c in domain for c in "/?#@ \t\r\n"):
        raise AddressServerError(f"illegal address server domain {domain!r}")
    if not subgroup or any(c in subgroup for c in "/?#@ \t\r\n"):
        raise AddressServerError(f"illegal address server subgroup {subgroup!r}")
    host = domain if ":" in domain else f"{domain}:{DEFAULT_PORT}"
    url = f"http://{host}{PATH_PREFIX}{subgroup}"
    if unit_name and unit_name.strip():
        url += f"-{unit_name.strip()}?nofix=1"
    return url


def split_url(url: str) -> tuple[str, int, str]:
    """``http://host:port/path`` as (host, port, path); only plain HTTP, as RocketMQ's clients speak it."""
    if not url.startswith("http://"):
        raise AddressServerError(f"not an http:// URL: {url!r}")
    rest = url[len("http://"):]
    hostport, slash, path = rest.partition("/")
    host, colon, port_text = hostport.rpartition(":")
    if not colon:
        host, port_text = hostport, str(DEFAULT_PORT)
    if not host or not port_text.isascii() or not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise AddressServerError(f"no host:port in {url!r}")
    return host.strip("[]"), int(port_text), slash + path


def parse_answer(body: bytes) -> list[str]:
    """The NameServer list in an answer: its first line, trimmed, ``;``-separated, each a host:port."""
    if len(body) > MAX_ANSWER_BYTES:
        raise AddressServerError(f"the answer is {len(body)} bytes (at most {MAX_ANSWER_BYTES})")
    try:
        text = body.decode("utf-8").strip()
    except UnicodeDecodeError:
        raise AddressServerError("the answer is not UTF-8") from None
    first = text.replace("\r", "\n").split("\n", 1)[0]
    addrs = [a.strip() for a in first.split(";") if a.strip()]
    if not addrs:
        raise AddressServerError("the answer names no NameServer")
    for addr in addrs:
        try:
            naming.check_addr(addr)
        except ValueError as e:
            raise AddressServerError(f"the answer names an illegal address: {e}") from None
    return addrs


def answer(addrs: list[str]) -> bytes:
    """What the address server sends for ``addrs``."""
    return ";".join(addrs).encode()


def configured_addr(env: Mapping[str, str] | None = None) -> str | None:
    """The NameServer list the environment gives outright (``rocketmq.namesrv.addr``, ``NAMESRV_ADDR``)."""
    env = os.environ if env is None else env
    return env.get(NAMESRV_ADDR_PROPERTY) or env.get(NAMESRV_ADDR_ENV) or None


def configured_ws_addr(domain: str | None = None, subgroup: str | None = None,
                       env: Mapping[str, str] | None = None) -> str | None:
    """The address server's URL from the arguments or the environment's ``rocketmq.namesrv.domain`` /
    ``.subgroup``; None where no domain is set (TidalMQ's clients do not ask jmenv.tbsite.net unasked)."""
    env = os.environ if env is None else env
    domain = domain or env.get(DOMAIN_PROPERTY)
    if not domain:
        return None
    return ws_addr(domain, subgroup or env.get(SUBGROUP_PROPERTY) or DEFAULT_SUBGROUP)

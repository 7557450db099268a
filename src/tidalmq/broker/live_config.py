"""UPDATE_BROKER_CONFIG: the keys the broker can take at runtime, checked as at start-up, and written
back to the broker's config file (RocketMQ's updateBrokerConfig persists to broker.conf).

Only keys read afresh on every request are live (docs/mqadmin.md lists them). Any other key the broker
knows is refused rather than stored: a value that shows in getBrokerConfig but does nothing until a
restart (ports, paths, roles, pool sizes fixed at start) would mislead the operator."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any

from tidalmq.broker.config import BrokerConfig
from tidalmq.common.config import ConfigError, apply_properties, camel_to_snake, snake_to_camel
from tidalmq.common.fileutil import atomic_write
from tidalmq.store.config import MessageStoreConfig

# BrokerConfig fields read per request (send, pull, recall, transaction and flow-control paths).
LIVE_BROKER_KEYS: frozenset[str] = frozenset((
    "brokerPermission", "slaveReadEnable", "brokerFastFailureEnable", "waitTimeMillsInSendQueue",
    "sendThreadPoolQueueCapacity", "longPollingEnable", "shortPollingTimeMills", "rejectTransactionMessage",
    "enableTopicMessageTypeCheck", "recallMessageEnable", "allowRecallWhenBrokerNotWriteable",
    "notifyConsumerIdsChangedEnable",
))
# MessageStoreConfig fields read per append; messageDelayLevel is handed on (broker/schedule/delay_table.py).
LIVE_STORE_KEYS: frozenset[str] = frozenset(("maxMessageSize", "messageDelayLevel"))
LIVE_KEYS = LIVE_BROKER_KEYS | LIVE_STORE_KEYS
# Room in a request frame beside the message body (headers, properties): the broker's frame limit is
# maxMessageSize plus this, fixed at start.
FRAME_HEADROOM = 1024 * 1024


def _known(obj: Any) -> set[str]:
    return {snake_to_camel(f.name) for f in dataclasses.fields(obj)}


def checked_update(bc: BrokerConfig, sc: MessageStoreConfig, props: dict[str, str],
                   max_message_size_limit: int) -> tuple[BrokerConfig, MessageStoreConfig]:
    """Configurations holding the values of ``props``, validated as at start-up (for ``apply_live`` to copy
    from); ``ConfigError`` (naming the key) for a key that is unknown, not live, or a value start-up would
    refuse. Nothing is changed."""
    if not props:
        raise ConfigError("no key=value in the request body")
    known = _known(bc) | _known(sc)
    for key in sorted(props):
        if key in LIVE_KEYS:
            continue
        if key in known:
            raise ConfigError(f"{key} cannot be changed at runtime; set it in broker.conf and restart the broker "
                              f"(live keys: {', '.join(sorted(LIVE_KEYS))})")
        raise ConfigError(f"unknown configuration key {key}")
    # The new values are checked on default configurations, not on copies of the running ones: a running
    # broker's own state can fail start-up's cross-key checks (in controller mode its brokerRole is SLAVE
    # until elected), and no live key takes part in one.
    new_bc, new_sc = BrokerConfig(), MessageStoreConfig()
    apply_properties(new_bc, {k: v for k, v in props.items() if k in LIVE_BROKER_KEYS}, strict=True)
    apply_properties(new_sc, {k: v for k, v in props.items() if k in LIVE_STORE_KEYS}, strict=True)
    new_bc.validate()
    new_sc.validate()
    # The remoting frame limit was sized from maxMessageSize at start; a larger message would not fit it.
    if new_sc.max_message_size > max_message_size_limit:
        raise ConfigError(f"maxMessageSize={new_sc.max_message_size}: must be at most {max_message_size_limit} "
                          "while the broker runs (the request frame limit set at start); restart to go higher")
    return new_bc, new_sc


def apply_live(bc: BrokerConfig, sc: MessageStoreConfig, new_bc: BrokerConfig, new_sc: MessageStoreConfig,
               keys: list[str]) -> None:
    """Copy the ``keys`` from the checked configurations onto the live ones (in place: every processor
    holds these very objects)."""
    for key in keys:
        name = camel_to_snake(key)
        src, dst = (new_bc, bc) if key in LIVE_BROKER_KEYS else (new_sc, sc)
        setattr(dst, name, getattr(src, name))


def persist(path: Path, props: dict[str, str]) -> None:
    """Rewrite ``key=value`` lines of the properties file ``path`` in place (comments and the other lines
    kept), appending the keys it lacks."""
    lines = path.read_text(encoding="utf-8").splitlines() if path.exists() else []
    todo = dict(props)
    for i, line in enumerate(lines):
        m = re.match(r"\s*([^=:\s#!][^=:\s]*)\s*[=:\s]", line + " ")
        if m and m.group(1) in todo:
            lines[i] = f"{m.group(1)}={todo.pop(m.group(1))}"
    lines += [f"{k}={v}" for k, v in todo.items()]
    atomic_write(path, ("\n".join(lines) + "\n").encode("utf-8"))

"""Configuration by RocketMQ's key names.

Config classes are dataclasses whose snake_case fields mirror RocketMQ's camelCase keys
(``mappedFileSizeCommitLog`` <-> ``mapped_file_size_commit_log``), so an operator's existing
``broker.conf`` (a Java properties file) applies unchanged.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

import javaproperties

T = TypeVar("T")

_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")


def camel_to_snake(key: str) -> str:
    return _CAMEL.sub("_", key).lower()


def snake_to_camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(p[:1].upper() + p[1:] for p in rest)


# RocketMQ 4's spellings of keys since renamed (its early MessageStoreConfig said "maped").
KEY_ALIASES = {
    "mapedFileSizeCommitLog": "mappedFileSizeCommitLog",
    "mapedFileSizeConsumeQueue": "mappedFileSizeConsumeQueue",
}


def parse_properties(text: str) -> dict[str, str]:
    """A Java .properties file read as ``java.util.Properties.load`` reads it (``=``, ``:`` or blank
    separators, ``#``/``!`` comments, line continuations, ``\\uXXXX`` escapes; the last of a repeated key
    wins), by the maintained ``javaproperties`` parser. A leading UTF-8 byte order mark is not part of the
    first key."""
    try:
        return javaproperties.loads(text.removeprefix("\ufeff"))
    except ValueError as e:  # a malformed \\u escape: the text may come from the wire (UPDATE_BROKER_CONFIG)
        raise ConfigError(f"not a properties text: {e}") from None


def load_properties_file(path: str | Path) -> dict[str, str]:
    return parse_properties(Path(path).read_text(encoding="utf-8"))


class ConfigError(ValueError):
    """A configuration key or value that cannot be used."""


def _coerce(value: str, target: Any, key: str) -> Any:
    if isinstance(target, bool):
        low = value.strip().lower()
        if low in ("true", "1", "yes"):
            return True
        if low in ("false", "0", "no"):
            return False
        raise ConfigError(f"{key}: expected true or false, got {value!r}")
    if isinstance(target, int):
        try:
            return int(value.strip())
        except ValueError:
            raise ConfigError(f"{key}: expected an integer, got {value!r}") from None
    if isinstance(target, float):
        try:
            return float(value.strip())
        except ValueError:
            raise ConfigError(f"{key}: expected a number, got {value!r}") from None
    return value


def apply_properties(obj: Any, props: dict[str, str], *, strict: bool = False) -> list[str]:
    """Set the fields of dataclass ``obj`` named by RocketMQ keys in ``props``.

    Returns the keys that matched no field (so a caller holding several config objects can
    apply the rest elsewhere and report what nobody knew). With ``strict`` an unknown key raises.
    """
    fields = {f.name for f in dataclasses.fields(obj)}
    unknown: list[str] = []
    for key, value in props.items():
        name = camel_to_snake(KEY_ALIASES.get(key, key)) if key not in fields else key
        if name in fields:
            setattr(obj, name, _coerce(value, getattr(obj, name), key))
        else:
            unknown.append(key)
    if strict and unknown:
        raise ConfigError("unknown configuration keys: " + ", ".join(sorted(unknown)))
    return unknown


# A check returns why a value is unusable, or None when it is fine.
Check = Callable[[Any], "str | None"]

JAVA_INT_MAX = 2**31 - 1
JAVA_LONG_MAX = 2**63 - 1


def one_of(*allowed: str) -> Check:
    """An enum-valued key, spelt exactly as RocketMQ spells it (RocketMQ's enums are case-sensitive)."""
    def check(value: Any) -> str | None:
        return None if value in allowed else f"allowed values are {', '.join(allowed)}"
    return check


def in_range(lo: int, hi: int) -> Check:
    def check(value: Any) -> str | None:
        return None if lo <= value <= hi else f"must be between {lo} and {hi}"
    return check


def port_in_range(lo: int = 0) -> Check:
    """A TCP port (``lo`` -1: "none" allowed); a value past 65535 would otherwise wrap when bound."""
    return in_range(lo, 65535)


def check_fields(obj: Any, checks: Mapping[str, Check]) -> None:
    """Refuse the first field of ``obj`` whose value fails its check, naming the RocketMQ key."""
    for name, check in checks.items():
        value = getattr(obj, name)
        why = check(value)
        if why is not None:
            raise ConfigError(f"{snake_to_camel(name)}={value!r}: {why}")


def to_properties(obj: Any) -> dict[str, str]:
    """The dataclass as RocketMQ-named string properties (for GET_BROKER_CONFIG and logs); fields
    marked ``metadata={"secret": True}`` show as ``******`` when set."""
    out: dict[str, str] = {}
    for f in dataclasses.fields(obj):
        v = getattr(obj, f.name)
        if f.metadata.get("secret") and v:
            v = "******"
        out[snake_to_camel(f.name)] = str(v).lower() if isinstance(v, bool) else str(v)
    return out

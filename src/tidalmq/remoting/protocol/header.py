"""How a request or response header is declared, and what is derived from one declaration.

A header is a class of typed fields, as RocketMQ's ``CommandCustomHeader`` classes are (``String`` names,
``Integer``/``Long`` numbers, ``@CFNotNull``) and as aiokafka declares each request's schema: each field
names its extFields key (and, for the send header, its SEND_MESSAGE_V2 letter), its kind, whether it is
required, and whether the ACL checks it (``subject``: RocketMQ 5's ``@RocketMQResource``). From that one
declaration come the validation of a request where it enters, the typed object its processor reads
(``parse``), the extFields a client writes (``to_ext``) and the resources the ACL checks.

Optional fields sent empty count as absent (the C++ client writes empty strings for fields it has no value
for). A request that fails is refused with a remark saying which field and why (``RequestError``).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Mapping
from enum import Enum
from typing import Any, ClassVar, NamedTuple, TypeVar, cast, dataclass_transform, overload

from tidalmq.common import naming as nm

INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1
INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1
_JAVA_INTEGER = re.compile(r"[+-]?[0-9]+", re.ASCII)


class Kind(Enum):
    TOPIC = "topic"  # a topic a request names: a legal topic or a group's %RETRY% / %DLQ% topic
    GROUP = "group"
    BROKER = "brokerName"
    CLUSTER = "clusterName"
    ADDR = "address"
    CONFIG_KEY = "config key"
    INT32 = "int"  # Java Integer / int
    INT64 = "long"  # Java Long / long
    PERM = "perm"  # PermName bits, 0..7
    TEXT = "text"  # any string, e.g. a pop receipt handle (extraInfo): only required to be present
    BOOL = "boolean"  # Java writes true/false; the C++ client writes its bool through an ostream: 1/0


class Access(Enum):
    """What the ACL requires on a subject field's resource (RocketMQ 5's @RocketMQAction)."""

    PUB = "PUB"  # published to (a group's %RETRY% topic: SUB on the group, acl/resources.py)
    SUB = "SUB"


class RequestError(ValueError):
    """A request refused before its processor: the message is the remark."""


_NAME_CHECKS: dict[Kind, Callable[[object], None]] = {
    Kind.TOPIC: nm.check_any_topic,
    Kind.GROUP: nm.check_group,
    Kind.BROKER: nm.check_broker_name,
    Kind.CLUSTER: nm.check_cluster_name,
    Kind.ADDR: nm.check_addr,
    Kind.CONFIG_KEY: nm.check_config_key,
}
_RANGES = {Kind.INT32: (INT32_MIN, INT32_MAX), Kind.INT64: (INT64_MIN, INT64_MAX), Kind.PERM: (0, nm.PERM_MAX)}
NUMBER_KINDS = frozenset(_RANGES)
NAME_KINDS = frozenset(_NAME_CHECKS)


def parse_number(field: str, kind: Kind, value: object) -> int:
    """``value`` as Java's Integer.parseInt / Long.parseLong reads it, refused out of the type's range."""
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise RequestError(f"the field <{field}> must be a number, got {type(value).__name__}")
    if isinstance(value, str):
        if len(value) > 24 or _JAVA_INTEGER.fullmatch(value) is None:
            raise RequestError(f"the field <{field}> is not a {kind.value}: {value[:32]!r}")
        value = int(value)
    lo, hi = _RANGES[kind]
    if not lo <= value <= hi:
        raise RequestError(f"the field <{field}> is out of range for a {kind.value}: {value} (allowed {lo}..{hi})")
    return value


def parse_bool(value: object) -> bool:
    return isinstance(value, str) and value.strip().lower() in ("true", "1")


# Fast paths, because every send passes here: a run of at most this many ASCII digits is within the
# type's range whatever it is, and a name already found legal is remembered (a broker sees few names).
SAFE_DIGITS = {Kind.INT32: 9, Kind.INT64: 18}
KNOWN_NAMES: dict[Kind, set[str]] = {kind: set() for kind in _NAME_CHECKS}
_KNOWN_NAMES_MAX = 8192


def check_value(field: str, kind: Kind, value: object) -> None:
    """Refuses ``value`` (RequestError) unless it is a legal value of ``kind``."""
    if kind is Kind.TEXT or kind is Kind.BOOL:
        if not isinstance(value, str):
            raise RequestError(f"the field <{field}> must be a string, got {type(value).__name__}")
        return
    if kind in _RANGES:
        if (isinstance(value, str) and len(value) <= SAFE_DIGITS.get(kind, 0)
                and value.isascii() and value.isdigit()):
            return
        parse_number(field, kind, value)
        return
    known = KNOWN_NAMES[kind]
    if isinstance(value, str) and value in known:  # JSON bodies may hold lists or objects: unhashable
        return
    try:
        _NAME_CHECKS[kind](value)
    except nm.NameError_ as e:
        raise RequestError(f"{e} (field <{field}>)") from None
    if len(known) >= _KNOWN_NAMES_MAX:
        known.clear()
    known.add(cast(str, value))  # the name check refuses anything but a str


class Field(NamedTuple):
    """One field of a header in one of its spellings."""

    name: str  # the extFields key
    kind: Kind
    required: bool
    subject: Access | None  # what the ACL requires on the resource it names; None: not checked
    attr: str  # the attribute of the header class
    default: Any = None


_META = "tidalmq.header"


@overload
def spec(name: str, kind: Kind, *, subject: Access | None = None, short: str | None = None) -> Any: ...
@overload
def spec(name: str, kind: Kind, *, default: Any, subject: Access | None = None, short: str | None = None) -> Any: ...
def spec(name: str, kind: Kind, *, default: Any = dataclasses.MISSING, subject: Access | None = None,
         short: str | None = None) -> Any:
    """A header field: its extFields key ``name``, kind, and default (none: required); ``short`` is its
    name in a header's second spelling (SEND_MESSAGE_V2's letters)."""
    return dataclasses.field(default=default, metadata={_META: (name, kind, subject, short)})


H = TypeVar("H", bound="Header")


class Header:
    """The base of every declared header: ``parse`` an extFields mapping, ``to_ext`` one."""

    __slots__ = ()
    # Every spelling of the header, numbered as the request table's form_of numbers them (most have one).
    FORMS: ClassVar[tuple[tuple[Field, ...], ...]] = ((),)
    _PARSERS: ClassVar[tuple[Callable[[Mapping[str, str]], Any], ...]] = ()
    _ENCODERS: ClassVar[tuple[Callable[[Any], dict[str, str]], ...]] = ()

    @classmethod
    def fields(cls, form: int = 0) -> tuple[Field, ...]:
        return cls.FORMS[form]

    @classmethod
    def parse(cls: type[H], ext: Mapping[str, str], form: int = 0) -> H:
        """The header ``ext`` carries, validated (RequestError) and converted to its fields' types."""
        return cast(H, cls._PARSERS[form](ext))

    @classmethod
    def key_of(cls, attr: str, form: int = 0) -> str:
        """The extFields key of attribute ``attr`` (a pre-encoded template names its keys)."""
        for f in cls.FORMS[form]:
            if f.attr == attr:
                return f.name
        raise KeyError(attr)

    def to_ext(self, form: int = 0) -> dict[str, str]:
        """This header as extFields (fields of value None are left out; booleans as true/false)."""
        return self._ENCODERS[form](self)


def _compile(cls: type[Header], fields: tuple[Field, ...]) -> Callable[[Mapping[str, str]], Any]:
    """The parser of one spelling, written out field by field as dataclasses writes its ``__init__``: the
    per-request path (every send passes here) then touches no Enum, calls no function for a name it has seen,
    a short run of digits or a plain true/false, and sets the object's slots without an ``__init__`` call.
    Only indices and attribute names (Python identifiers of the declaration) enter the source; keys, kinds
    and defaults are values of its namespace."""
    ns: dict[str, Any] = {"new": object.__new__, "cls": cls, "RequestError": RequestError,
                          "check_value": check_value, "parse_number": parse_number, "parse_bool": parse_bool}
    lines = ["def parse(ext):", "    get = ext.get", "    o = new(cls)"]
    for i, f in enumerate(fields):
        assert f.attr.isidentifier(), f.attr
        ns[f"N{i}"], ns[f"K{i}"], ns[f"D{i}"] = f.name, f.kind, f.default
        ns[f"M{i}"] = f"the custom field <{f.name}> is null"
        target = f"o.{f.attr}"
        lines.append(f"    v = get(N{i})")
        if f.required:
            lines.append(f"    if v is None: raise RequestError(M{i})")
            ind = "    "
        else:
            lines.append(f"    if v is None or v == '': {target} = D{i}")
            lines.append("    else:")
            ind = "        "
        if f.kind in NAME_KINDS:
            ns[f"S{i}"] = KNOWN_NAMES[f.kind]
            lines.append(f"{ind}if v.__class__ is not str or v not in S{i}: check_value(N{i}, K{i}, v)")
            lines.append(f"{ind}{target} = v")
        elif f.kind in NUMBER_KINDS:
            digits = SAFE_DIGITS.get(f.kind, 0)
            lines.append(f"{ind}if v.__class__ is str and len(v) <= {digits} and v.isdigit() and v.isascii(): "
                         f"{target} = int(v)")
            lines.append(f"{ind}else: {target} = parse_number(N{i}, K{i}, v)")
        elif f.kind is Kind.BOOL:
            lines.append(f"{ind}if v == 'true': {target} = True")
            lines.append(f"{ind}elif v == 'false': {target} = False")
            lines.append(f"{ind}else:")
            lines.append(f"{ind}    if v.__class__ is not str: check_value(N{i}, K{i}, v)")
            lines.append(f"{ind}    {target} = parse_bool(v)")
        else:
            lines.append(f"{ind}if v.__class__ is not str: check_value(N{i}, K{i}, v)")
            lines.append(f"{ind}{target} = v")
    lines.append("    return o")
    exec("\n".join(lines), ns)  # noqa: S102 - generated from indices and identifiers, see the docstring
    return cast(Callable[[Mapping[str, str]], Any], ns["parse"])


def _compile_encoder(fields: tuple[Field, ...]) -> Callable[[Any], dict[str, str]]:
    """``to_ext`` of one spelling, written out as the parser is (a pull's or a pop's response and every
    client request go through it)."""
    ns: dict[str, Any] = {f"N{i}": f.name for i, f in enumerate(fields)}
    lines = ["def to_ext(o):", "    out = {}"]
    for i, f in enumerate(fields):
        assert f.attr.isidentifier(), f.attr
        if f.kind is Kind.BOOL:
            value = "'true' if v else 'false'"
        elif f.kind in NUMBER_KINDS:
            value = "str(v)"
        else:
            value = "v if v.__class__ is str else str(v)"
        lines.append(f"    v = o.{f.attr}")
        lines.append(f"    if v is not None: out[N{i}] = {value}")
    lines.append("    return out")
    exec("\n".join(lines), ns)  # noqa: S102 - generated from indices and identifiers, as _compile
    return cast(Callable[[Any], dict[str, str]], ns["to_ext"])


@dataclass_transform(kw_only_default=True, field_specifiers=(spec,))
def header(cls: type[H]) -> type[H]:
    """Declares ``cls`` a header: a keyword-only dataclass of ``spec`` fields, with its parsers."""
    made = cast(type[H], dataclasses.dataclass(kw_only=True, slots=True)(cls))
    forms: list[list[Field]] = [[], []]
    for f in dataclasses.fields(cast(Any, made)):
        name, kind, subject, short = f.metadata[_META]
        required = f.default is dataclasses.MISSING
        default = None if required else f.default
        forms[0].append(Field(name, kind, required, subject, f.name, default))
        if short is not None:
            forms[1].append(Field(short, kind, required, subject, f.name, default))
    made.FORMS = tuple(tuple(fs) for fs in forms if fs) or ((),)
    made._PARSERS = tuple(_compile(made, fs) for fs in made.FORMS)
    made._ENCODERS = tuple(_compile_encoder(fs) for fs in made.FORMS)
    return made


@header
class NoHeader(Header):
    """The header of a request that carries no fields of its own."""


"""Java's value semantics as RocketMQ's filter expressions see them.

Values are Java objects: ``String`` (``str``), ``Boolean`` (``bool``), ``Integer`` (``int``), ``Long``
(``JLong``, an ``int`` subclass, because the two convert differently: a property ``"5000000000"`` is
not an Integer), ``Double`` (``float``) and null (``None``). Message properties are always strings.

``compare`` is ComparisonExpression.__compare with string conversion on (RocketMQ parses every
selector that way): operands of different types are widened, or the string side is parsed as the
other side's type; a string that does not parse raises ``EvaluationError`` (Java's
NumberFormatException), which makes the whole expression fail for that message.
"""

from __future__ import annotations

import math
import re
from typing import Any

from tidalmq.filter.errors import EvaluationError

INT_MIN, INT_MAX = -(1 << 31), (1 << 31) - 1
LONG_MIN, LONG_MAX = -(1 << 63), (1 << 63) - 1
DOUBLE_MAX = 1.7976931348623157e308
DOUBLE_MIN = 5e-324  # Double.MIN_VALUE, printed by Java as 4.9E-324


class JLong(int):
    """A Java ``Long`` (a plain ``int`` is an ``Integer``)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"{int(self)}L"


_INTEGER = re.compile(r"[+-]?\d+")
_DOUBLE = re.compile(
    r"[+-]?(?:NaN|Infinity|(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?[fFdD]?"
    r"|0[xX](?:[0-9a-fA-F]+\.?[0-9a-fA-F]*|\.[0-9a-fA-F]+)[pP][+-]?[0-9]+[fFdD]?)")


def jtype(v: object) -> str:
    """One letter per Java type: S B I L D, and N for null."""
    t = type(v)
    if t is str:
        return "S"
    if t is bool:
        return "B"
    if t is int:
        return "I"
    if t is JLong:
        return "L"
    if t is float:
        return "D"
    if v is None:
        return "N"
    raise TypeError(f"not a filter value: {v!r}")


def parse_int(s: str) -> int:
    """Integer.valueOf."""
    if s.isdecimal() or _INTEGER.fullmatch(s):
        v = int(s)
        if INT_MIN <= v <= INT_MAX:
            return v
    raise EvaluationError(f'For input string: "{s}" (not an int)')


def parse_long(s: str) -> JLong:
    """Long.valueOf."""
    if s.isdecimal() or _INTEGER.fullmatch(s):
        v = int(s)
        if LONG_MIN <= v <= LONG_MAX:
            return JLong(v)
    raise EvaluationError(f'For input string: "{s}" (not a long)')


def _java_trim(s: str) -> str:
    i, j = 0, len(s)
    while i < j and s[i] <= " ":
        i += 1
    while j > i and s[j - 1] <= " ":
        j -= 1
    return s[i:j]


def parse_double(s: str) -> float:
    """Double.valueOf: surrounding control characters and blanks are ignored, ``NaN``, ``Infinity``,
    hex floats and a trailing type letter (``1.5f``, ``2d``) are accepted."""
    if s.isascii() and s.isdigit():  # the common case, and the same value in both languages
        return float(s)
    t = _java_trim(s)
    if not _DOUBLE.fullmatch(t):
        raise EvaluationError(f'For input string: "{s}" (not a double)')
    sign = -1.0 if t[0] == "-" else 1.0
    body = t.lstrip("+-")
    if body == "NaN":
        return math.nan
    if body == "Infinity":
        return sign * math.inf
    if body[-1] in "fFdD":  # the type suffix (the exponent of a hex float is decimal, so never a digit)
        body = body[:-1]
    if body[:2].lower() == "0x":
        return sign * float.fromhex(body)
    return sign * float(body)


def parse_boolean(s: str) -> bool:
    """Boolean.valueOf: true only for "true" in any case."""
    return len(s) == 4 and s.lower() == "true"


def double_compare(a: float, b: float) -> int:
    """Double.compareTo: NaN is above everything and equal to itself; -0.0 is below 0.0."""
    if a < b:
        return -1
    if a > b:
        return 1
    if a == b:
        if a == 0.0:
            sa, sb = math.copysign(1.0, a), math.copysign(1.0, b)
            return (sa > sb) - (sa < sb)
        return 0
    a_nan, b_nan = a != a, b != b
    return (a_nan > b_nan) - (a_nan < b_nan)


def compare(lv: Any, rv: Any) -> int:
    """ComparisonExpression.__compare(lv, rv, convertStringExpressions=true). Both non-null Java values
    (``jtype`` tells which), hence ``Any``."""
    lc, rc = jtype(lv), jtype(rv)
    if lc != rc:
        if lc == "B":
            if rc == "S":  # Java casts the Boolean to String there: ClassCastException
                raise EvaluationError("a boolean cannot be compared with a string")
            return -1
        if lc == "I":
            if rc == "L":
                lv = JLong(lv)
            elif rc == "D":
                lv = float(lv)
            elif rc == "S":
                rv = parse_int(rv)
            else:
                return -1
        elif lc == "L":
            if rc == "I":
                rv = JLong(rv)
            elif rc == "D":
                lv = float(lv)
            elif rc == "S":
                rv = parse_long(rv)
            else:
                return -1
        elif lc == "D":
            if rc in ("I", "L"):
                rv = float(rv)
            elif rc == "S":
                rv = parse_double(rv)
            else:
                return -1
        elif lc == "S":
            if rc == "B":
                lv = parse_boolean(lv)
            elif rc == "I":
                lv = parse_int(lv)
            elif rc == "L":
                lv = parse_long(lv)
            elif rc == "D":
                lv = parse_double(lv)
            else:
                return -1
        else:
            return -1
    if type(lv) is float:
        return double_compare(lv, rv)
    return (lv > rv) - (lv < rv)


def equals(lv: object, rv: object) -> bool:
    """``lv.equals(rv)``: same Java type and value (Double.equals compares bits: NaN equals NaN)."""
    if jtype(lv) != jtype(rv):
        return False
    if type(lv) is float and type(rv) is float:  # (the second holds when the first does: same jtype)
        return double_compare(lv, rv) == 0
    return lv == rv


def negate(v: object) -> object:
    """UnaryExpression.createNegate: numbers are negated with Java's overflow, anything else is null."""
    # ``type(v) is`` each time rather than once into a local: the type checker narrows ``v`` only so
    if type(v) is int:
        return v if v == INT_MIN else -v
    if type(v) is JLong:
        return v if v == LONG_MIN else JLong(-v)
    if type(v) is float:
        return -v
    return None


def to_text(v: object) -> str:
    """A constant as RocketMQ prints it in messages."""
    if v is None:
        return "NULL"
    if v is True:
        return "TRUE"
    if v is False:
        return "FALSE"
    if isinstance(v, str):
        return "'" + v.replace("'", "''") + "'"
    return str(int(v)) if isinstance(v, int) else repr(v)

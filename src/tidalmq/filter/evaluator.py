"""Compile a selector tree into a tree of closures, once per subscription.

Each closure takes the message's properties (a mapping of str to str) and returns a Java value or
None (SQL's unknown), with RocketMQ's three-valued logic: a comparison with a missing property is
unknown, ``unknown AND false`` is false, ``unknown OR true`` is true, ``NOT unknown`` is unknown,
and a message matches only when the whole expression is true. An ``EvaluationError`` (a property
that is not a number where one is needed) makes the message not match, as the broker's
ExpressionMessageFilter does when evaluation throws.

The common shapes — a property against a literal — get specialised closures; everything else goes
through the general Java comparison in ``jvalues``.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping
from typing import Any, cast

from tidalmq.filter import nodes as n
from tidalmq.filter.errors import EvaluationError
from tidalmq.filter.jvalues import (
    JLong,
    compare,
    double_compare,
    equals,
    negate,
    parse_double,
    parse_int,
    parse_long,
)

Props = Mapping[str, str]
Evaluator = Callable[[Props], object]

_TESTS: dict[str, Callable[[int], bool]] = {
    ">": lambda c: c > 0, ">=": lambda c: c >= 0, "<": lambda c: c < 0, "<=": lambda c: c <= 0,
}
# Numbers compared with a numeric constant (Any: the values are Java numbers of whichever type).
_OPS: dict[str, Callable[[Any, Any], bool]] = {">": operator.gt, ">=": operator.ge, "<": operator.lt, "<=": operator.le}


def _convert_for(value: object) -> Callable[[str], object] | None:
    """How a string property is converted to compare with this constant (None: not a number)."""
    t = type(value)
    if t is int:
        return parse_int
    if t is JLong:
        return parse_long
    if t is float:
        return parse_double
    return None


def build(node: n.Node) -> Evaluator:
    """The evaluator of ``node``."""
    match node:
        case n.Const(value=v):
            return lambda props: v
        case n.Prop(name=name):
            return lambda props: props.get(name)
        case n.Negate(operand=o):
            inner = build(o)
            return lambda props: negate(inner(props))  # null and non-numbers negate to null
        case n.BoolCast(operand=o):
            inner = build(o)

            def bool_cast(props: Props) -> object:
                v = inner(props)
                if v is None:
                    return None
                return v if type(v) is bool else False
            return bool_cast
        case n.Not(operand=o):
            inner = build(o)

            def not_(props: Props) -> object:
                v = inner(props)
                return None if v is None else not v
            return not_
        case n.And(left=a, right=b):
            return _and(build(a), build(b))
        case n.Or(left=a, right=b):
            return _or(build(a), build(b))
        case n.IsNull(operand=o):
            if isinstance(o, n.Prop):
                name = o.name
                return lambda props: props.get(name) is None
            inner = build(o)
            return lambda props: inner(props) is None
        case n.Equal(left=a, right=b):
            return _equal(a, b)
        case n.Relational(op=op, left=a, right=b):
            return _relational(op, a, b)
        case n.InList(operand=n.Prop(name=name), values=values, negated=neg):
            members = frozenset(values)

            def in_list(props: Props) -> object:
                v = props.get(name)
                if v is None:
                    return None
                return (v in members) is not neg
            return in_list
        case n.StringMatch(kind=kind, operand=o, search=search, negated=neg):
            inner = build(o)
            test = {"CONTAINS": lambda s: search in s, "STARTSWITH": lambda s: s.startswith(search),
                    "ENDSWITH": lambda s: s.endswith(search)}[kind]

            def string_match(props: Props) -> object:
                if not search:
                    return False
                v = inner(props)
                if type(v) is not str:  # null, number or boolean: false, even negated
                    return False
                return test(v) is not neg
            return string_match
    raise TypeError(f"cannot evaluate {node!r}")


def _and(a: Evaluator, b: Evaluator) -> Evaluator:
    def and_(props: Props) -> object:
        lv = a(props)
        if lv is False:
            return False
        rv = b(props)
        if rv is False:
            return False
        if lv is None or rv is None:
            return None
        return True
    return and_


def _or(a: Evaluator, b: Evaluator) -> Evaluator:
    def or_(props: Props) -> object:
        lv = a(props)
        if lv is True:
            return True
        rv = b(props)
        if rv is True:
            return True
        if lv is None or rv is None:
            return None
        return False
    return or_


def _equal(a: n.Node, b: n.Node) -> Evaluator:
    if isinstance(a, n.Prop) and isinstance(b, n.Const) and b.value is not None:
        name, c = a.name, b.value
        if type(c) is str:
            return lambda props: None if (v := props.get(name)) is None else v == c
        conv = _convert_for(c)
        if conv is not None:  # Integer/Long/Double.valueOf, then compareTo (a literal is never NaN or 0.0)
            return lambda props: None if (v := props.get(name)) is None else conv(v) == c
    la, lb = build(a), build(b)

    def equal(props: Props) -> object:
        lv = la(props)
        rv = lb(props)
        if lv is None or rv is None:
            if lv is None and rv is None:
                return True
            return None if lv is None else False  # RocketMQ: 'x' = missing is false, missing = 'x' unknown
        if equals(lv, rv):
            return True
        return compare(lv, rv) == 0
    return equal


def _relational(op: str, a: n.Node, b: n.Node) -> Evaluator:
    if isinstance(a, n.Prop) and isinstance(b, n.Const):
        conv = _convert_for(b.value)
        if conv is not None:
            name, c = a.name, cast(Any, b.value)
            fast = _OPS[op]
            test = _TESTS[op]
            if conv is parse_double:
                def prop_vs_double(props: Props) -> object:
                    v = props.get(name)
                    if v is None:
                        return None
                    x = parse_double(v)
                    if x == x:
                        return fast(x, c)
                    return test(double_compare(x, c))  # NaN sorts above all
                return prop_vs_double

            def prop_vs_int(props: Props) -> object:
                v = props.get(name)
                if v is None:
                    return None
                return fast(conv(v), c)
            return prop_vs_int
    la, lb = build(a), build(b)
    test = _TESTS[op]

    def relational(props: Props) -> object:
        lv = la(props)
        if lv is None:
            return None
        rv = lb(props)
        if rv is None:
            return None
        if type(lv) is str and type(rv) is str:
            # Ordering strings is illegal in RocketMQ unless both read as doubles.
            return test(double_compare(parse_double(lv), parse_double(rv)))
        return test(compare(lv, rv))
    return relational


def matcher(node: n.Node) -> Callable[[Props], bool]:
    """``props -> bool``: true only when the expression evaluates to true; an evaluation error is
    a non-match."""
    fn = build(node)

    def matches(props: Props) -> bool:
        try:
            return fn(props) is True
        except EvaluationError:
            return False
    return matches

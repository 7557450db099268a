"""The syntax tree of a SQL92 selector. Derived forms are built from the primitives as RocketMQ does:
``a <> b`` is ``NOT (a = b)``, ``BETWEEN`` two comparisons joined by AND, ``NOT BETWEEN`` by OR,
``IS NOT NULL`` is ``NOT (a IS NULL)``."""

from __future__ import annotations

from dataclasses import dataclass

from tidalmq.filter.jvalues import to_text


@dataclass(frozen=True, slots=True)
class Const:
    value: object  # str, bool, int (Integer), JLong, float (Double) or None (NULL)
    pos: int = 0


@dataclass(frozen=True, slots=True)
class Prop:
    name: str
    pos: int = 0


@dataclass(frozen=True, slots=True)
class Negate:
    operand: Node
    pos: int = 0


@dataclass(frozen=True, slots=True)
class Not:
    operand: Node
    pos: int = 0


@dataclass(frozen=True, slots=True)
class BoolCast:
    """A property used where a boolean is expected: true only if its value is the Boolean true."""

    operand: Node
    pos: int = 0


@dataclass(frozen=True, slots=True)
class And:
    left: Node
    right: Node
    pos: int = 0


@dataclass(frozen=True, slots=True)
class Or:
    left: Node
    right: Node
    pos: int = 0


@dataclass(frozen=True, slots=True)
class Equal:
    left: Node
    right: Node
    pos: int = 0


@dataclass(frozen=True, slots=True)
class IsNull:
    operand: Node
    pos: int = 0


@dataclass(frozen=True, slots=True)
class Relational:
    op: str  # > >= < <=
    left: Node
    right: Node
    pos: int = 0


@dataclass(frozen=True, slots=True)
class InList:
    operand: Prop
    values: tuple[str, ...]
    negated: bool = False
    pos: int = 0


@dataclass(frozen=True, slots=True)
class StringMatch:
    kind: str  # CONTAINS STARTSWITH ENDSWITH
    operand: Node
    search: str
    negated: bool = False
    pos: int = 0


Node = Const | Prop | Negate | Not | BoolCast | And | Or | Equal | IsNull | Relational | InList | StringMatch

BOOLEAN_NODES = (Not, BoolCast, And, Or, Equal, IsNull, Relational, InList, StringMatch)


def is_boolean(node: Node) -> bool:
    """RocketMQ's BooleanExpression: comparisons, logic, and the TRUE / FALSE / NULL literals."""
    if isinstance(node, Const):
        return node.value is None or isinstance(node.value, bool)
    return isinstance(node, BOOLEAN_NODES)


def render(node: Node) -> str:
    """The expression back as text (fully parenthesised), for messages and tests."""
    match node:
        case Const(value=v):
            return to_text(v)
        case Prop(name=n):
            return n
        case Negate(operand=o):
            return f"-{render(o)}"
        case Not(operand=o):
            return f"(NOT {render(o)})"
        case BoolCast(operand=o):
            return render(o)
        case And(left=a, right=b):
            return f"({render(a)} AND {render(b)})"
        case Or(left=a, right=b):
            return f"({render(a)} OR {render(b)})"
        case Equal(left=a, right=b):
            return f"({render(a)} = {render(b)})"
        case IsNull(operand=o):
            return f"({render(o)} IS NULL)"
        case Relational(op=op, left=a, right=b):
            return f"({render(a)} {op} {render(b)})"
        case InList(operand=o, values=vs, negated=neg):
            items = ", ".join(to_text(v) for v in vs)
            return f"({render(o)} {'NOT IN' if neg else 'IN'} ({items}))"
        case StringMatch(kind=k, operand=o, search=s, negated=neg):
            return f"({render(o)} {'NOT ' if neg else ''}{k} {to_text(s)})"
    raise TypeError(node)


def start(node: Node) -> int:
    """Where the text of ``node`` begins (its leftmost token)."""
    while True:
        if isinstance(node, And | Or | Equal | Relational):
            node = node.left
        elif isinstance(node, IsNull | InList | StringMatch | BoolCast):
            node = node.operand
        else:
            return node.pos


def properties_of(node: Node) -> set[str]:
    """Every property name the expression reads."""
    out: set[str] = set()
    stack: list[Node] = [node]
    while stack:
        n = stack.pop()
        if isinstance(n, Prop):
            out.add(n.name)
        elif isinstance(n, Negate | Not | BoolCast | IsNull | InList | StringMatch):
            stack.append(n.operand)
        elif isinstance(n, And | Or | Equal | Relational):
            stack += (n.left, n.right)
    return out

"""Recursive-descent parser of RocketMQ's SQL92 selector, one function per production of
SelectorParser.jj, with the checks RocketMQ's expression factories make while building the tree
(ComparisonExpression.checkLessThanOperand and friends), so that the same expressions are refused.

Precedence, loosest first: OR, AND, equality (``=``, ``<>``, ``IS [NOT] NULL``), comparison (``>``
``>=`` ``<`` ``<=``, ``[NOT] BETWEEN``, ``[NOT] IN``, ``[NOT] CONTAINS`` / ``STARTSWITH`` /
``ENDSWITH``), unary (``+``, ``-``, ``NOT``). One difference from RocketMQ, on purpose: text left over
after a complete expression is an error here, while the JavaCC grammar silently ignores it (so
``a = 1 b = 2`` would filter on ``a = 1`` alone).
"""

from __future__ import annotations

from tidalmq.filter.errors import EvaluationError, FilterSyntaxError
from tidalmq.filter.jvalues import DOUBLE_MAX, DOUBLE_MIN, INT_MAX, LONG_MAX, JLong, compare, to_text
from tidalmq.filter.lexer import Kind, Token, decode_string, tokenize
from tidalmq.filter.nodes import (
    And,
    BoolCast,
    Const,
    Equal,
    InList,
    IsNull,
    Negate,
    Node,
    Not,
    Or,
    Prop,
    Relational,
    StringMatch,
    is_boolean,
    render,
    start,
)

_RELATIONAL = (">", ">=", "<", "<=")
_STRING_OPS = ("CONTAINS", "STARTSWITH", "ENDSWITH")


def parse(expression: str) -> Node:
    """Parse a selector into its tree (whose top is boolean). Raises ``FilterSyntaxError``."""
    if expression is None or not expression.strip():
        raise FilterSyntaxError("the expression is empty", 0, expression or "")
    return _Parser(expression).selector()


class _Parser:
    def __init__(self, src: str) -> None:
        self.src = src
        self.toks = tokenize(src)
        self.i = 0

    # token helpers ---------------------------------------------------------------------------
    @property
    def tok(self) -> Token:
        return self.toks[self.i]

    def peek(self, k: int = 1) -> Token:
        return self.toks[min(self.i + k, len(self.toks) - 1)]

    def at(self, kind: Kind, text: str | None = None, tok: Token | None = None) -> bool:
        t = tok or self.tok
        return t.kind is kind and (text is None or t.text == text)

    def kw(self, word: str, tok: Token | None = None) -> bool:
        return self.at(Kind.KEYWORD, word, tok)

    def op(self, symbol: str, tok: Token | None = None) -> bool:
        return self.at(Kind.OP, symbol, tok)

    def advance(self) -> Token:
        t = self.tok
        if t.kind is not Kind.EOF:
            self.i += 1
        return t

    def error(self, reason: str, pos: int | None = None) -> FilterSyntaxError:
        return FilterSyntaxError(reason, self.tok.pos if pos is None else pos, self.src)

    def unexpected(self, wanted: str) -> FilterSyntaxError:
        return self.error(f"expected {wanted}, found {self.tok.describe()}")

    def expect_op(self, symbol: str) -> Token:
        if not self.op(symbol):
            raise self.unexpected(f"'{symbol}'")
        return self.advance()

    def string_literal(self) -> str:
        if not self.at(Kind.STRING):
            raise self.unexpected("a string literal")
        return decode_string(self.advance().text)

    # semantic checks (RocketMQ's factory methods) ---------------------------------------------
    def as_boolean(self, node: Node) -> Node:
        if is_boolean(node):
            return node
        if isinstance(node, Prop):
            return BoolCast(node, node.pos)
        raise self.error(f"expression will not result in a boolean value: {render(node)}", start(node))

    def check_comparable(self, node: Node) -> None:
        """checkLessThanOperand: only numbers (or properties, or arithmetic) can be ordered."""
        if isinstance(node, Const):
            if isinstance(node.value, int | float) and not isinstance(node.value, bool):
                return
            raise self.error(f"value {to_text(node.value)} cannot be compared with >, >=, <, <= or BETWEEN "
                             f"(only numbers can)", node.pos)
        if is_boolean(node):
            raise self.error(f"value {render(node)} cannot be compared with >, >=, <, <= or BETWEEN "
                             f"(it is a condition)", start(node))

    def check_equal_operand(self, node: Node) -> None:
        if isinstance(node, Const) and node.value is None:
            raise self.error("NULL cannot be compared with = or <> (use IS NULL / IS NOT NULL)", node.pos)

    def equal(self, left: Node, right: Node, pos: int) -> Node:
        self.check_equal_operand(left)
        self.check_equal_operand(right)
        if isinstance(left, Const) and isinstance(right, Const) and is_boolean(left) and not is_boolean(right):
            raise self.error(f"{to_text(left.value)} cannot be compared with {to_text(right.value)}", left.pos)
        return Equal(left, right, pos)

    def relational(self, op: str, left: Node, right: Node, pos: int) -> Node:
        self.check_comparable(left)
        self.check_comparable(right)
        return Relational(op, left, right, pos)

    def between(self, value: Node, low: Node, high: Node, pos: int) -> Node:
        if isinstance(low, Const) and isinstance(high, Const):
            if low.value is None or high.value is None:
                raise self.error("illegal values of BETWEEN: they cannot be NULL", low.pos)
            try:
                ret = compare(high.value, low.value)
            except EvaluationError as e:
                raise self.error(f"illegal values of BETWEEN: {e}", low.pos) from None
            if ret < 0:
                raise self.error(f"illegal values of BETWEEN: the low value ({to_text(low.value)}) must be "
                                 f"less than or equal to the high value ({to_text(high.value)})", low.pos)
        return And(self.relational(">=", value, low, pos), self.relational("<=", value, high, pos), pos)

    # grammar ----------------------------------------------------------------------------------
    def selector(self) -> Node:
        node = self.or_expr()
        if self.tok.kind is not Kind.EOF:
            raise self.error(f"unexpected {self.tok.describe()} after a complete expression")
        return self.as_boolean(node)

    def or_expr(self) -> Node:
        left = self.and_expr()
        while self.kw("OR"):
            pos = self.advance().pos
            right = self.and_expr()
            left = Or(self.as_boolean(left), self.as_boolean(right), pos)
        return left

    def and_expr(self) -> Node:
        left = self.equality()
        while self.kw("AND"):
            pos = self.advance().pos
            right = self.equality()
            left = And(self.as_boolean(left), self.as_boolean(right), pos)
        return left

    def equality(self) -> Node:
        left = self.comparison()
        while True:
            if self.op("="):
                pos = self.advance().pos
                left = self.equal(left, self.comparison(), pos)
            elif self.op("<>"):
                pos = self.advance().pos
                left = Not(self.equal(left, self.comparison(), pos), pos)
            elif self.kw("IS"):
                pos = self.advance().pos
                if self.kw("NULL"):
                    self.advance()
                    left = IsNull(left, pos)
                elif self.kw("NOT"):
                    self.advance()
                    if not self.kw("NULL"):
                        raise self.unexpected("NULL after IS NOT")
                    self.advance()
                    left = Not(IsNull(left, pos), pos)
                else:
                    raise self.unexpected("NULL or NOT NULL after IS")
            else:
                return left

    def comparison(self) -> Node:
        left = self.unary()
        while True:
            t = self.tok
            if t.kind is Kind.OP and t.text in _RELATIONAL:
                self.advance()
                left = self.relational(t.text, left, self.unary(), t.pos)
                continue
            negated = False
            if self.kw("NOT") and self.peek().kind is Kind.KEYWORD and self.peek().text in (
                    *_STRING_OPS, "BETWEEN", "IN"):
                self.advance()
                negated = True
            t = self.tok
            if t.kind is Kind.KEYWORD and t.text in _STRING_OPS:
                self.advance()
                left = StringMatch(t.text, left, self.string_literal(), negated, t.pos)
            elif self.kw("BETWEEN"):
                self.advance()
                low = self.unary()
                if not self.kw("AND"):
                    raise self.unexpected("AND in BETWEEN ... AND ...")
                self.advance()
                high = self.unary()
                if negated:
                    left = Or(self.relational("<", left, low, t.pos), self.relational(">", left, high, t.pos), t.pos)
                else:
                    left = self.between(left, low, high, t.pos)
            elif self.kw("IN"):
                self.advance()
                if not isinstance(left, Prop):
                    raise self.error(f"IN needs a property on its left, got {render(left)}", start(left))
                self.expect_op("(")
                values = [self.string_literal()]
                while self.op(","):
                    self.advance()
                    values.append(self.string_literal())
                self.expect_op(")")
                left = InList(left, tuple(values), negated, t.pos)
            else:
                return left

    def unary(self) -> Node:
        t = self.tok
        if self.op("+"):
            self.advance()
            return self.unary()
        if self.op("-"):
            self.advance()
            return Negate(self.unary(), t.pos)
        if self.kw("NOT"):
            self.advance()
            return Not(self.as_boolean(self.unary()), t.pos)
        return self.primary()

    def primary(self) -> Node:
        t = self.tok
        if t.kind is Kind.ID:
            self.advance()
            return Prop(t.text, t.pos)
        if self.op("("):
            self.advance()
            node = self.or_expr()
            self.expect_op(")")
            return node
        return self.literal()

    def literal(self) -> Node:
        t = self.tok
        if t.kind is Kind.STRING:
            self.advance()
            return Const(decode_string(t.text), t.pos)
        if t.kind is Kind.DECIMAL:
            self.advance()
            text = t.text.rstrip("lL")
            v = int(text)
            if v > LONG_MAX:
                raise self.error(f"integer literal {t.text} is out of the range of a long", t.pos)
            return Const(v if v <= INT_MAX else JLong(v), t.pos)
        if t.kind is Kind.FLOAT:
            self.advance()
            f = float(t.text)
            if f > DOUBLE_MAX:
                raise self.error(f"{t.text} is greater than {DOUBLE_MAX!r}", t.pos)
            if f < DOUBLE_MIN:  # RocketMQ refuses 0.0 (and underflow) this way, though -0.0 cannot be written
                raise self.error(f"{t.text} is less than 4.9E-324 (RocketMQ refuses a zero floating-point "
                                 f"literal: write 0)", t.pos)
            return Const(f, t.pos)
        if t.kind is Kind.KEYWORD and t.text in ("TRUE", "FALSE", "NULL"):
            self.advance()
            return Const({"TRUE": True, "FALSE": False, "NULL": None}[t.text], t.pos)
        raise self.unexpected("a property, a literal, '(' or a unary operator")

"""Tokenizer of RocketMQ's SQL92 selector (the token section of SelectorParser.jj).

JavaCC picks the longest token at each position (the first declared on a tie, so keywords beat
identifiers of the same length) and falls back to the longest prefix that formed a token: ``--``
with no newline after it is two minus signs, not an unterminated comment.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum

from tidalmq.filter.errors import FilterSyntaxError


class Kind(Enum):
    KEYWORD = "keyword"
    DECIMAL = "integer literal"
    FLOAT = "floating-point literal"
    STRING = "string literal"
    ID = "property name"
    OP = "operator"
    EOF = "end of expression"


KEYWORDS = frozenset({"NOT", "AND", "OR", "BETWEEN", "IN", "TRUE", "FALSE", "NULL", "IS",
                      "CONTAINS", "STARTSWITH", "ENDSWITH"})

# Two-character operators first so that the longest one wins.
OPERATORS = ("<>", "<=", ">=", "=", "<", ">", "(", ")", ",", "+", "-")
WHITESPACE = " \t\n\r\f"

_DECIMAL = re.compile(r"0|[1-9][0-9]*[lL]?")
_FLOAT = re.compile(r"[0-9]+\.[0-9]*(?:[eE][+-]?[0-9]+)?|\.[0-9]+(?:[eE][+-]?[0-9]+)?|[0-9]+[eE][+-]?[0-9]+")
_STRING = re.compile(r"'(?:''|[^'])*'")
_ID = re.compile(r"[A-Za-z_$][A-Za-z0-9_$]*")
_LINE_COMMENT = re.compile(r"--[^\n\r]*(?:\r\n|\n|\r)")
_BLOCK_COMMENT = re.compile(r"/\*.*?\*/", re.S)


@dataclass(frozen=True, slots=True)
class Token:
    kind: Kind
    text: str  # the source text; upper-cased for keywords
    pos: int  # 0-based offset in the expression

    def describe(self) -> str:
        if self.kind is Kind.EOF:
            return "the end of the expression"
        return f"{self.kind.value} {self.text!r}"


def tokenize(src: str) -> list[Token]:
    """The whole token list, ending with an EOF token. Raises ``FilterSyntaxError``."""
    out: list[Token] = []
    i, n = 0, len(src)
    while i < n:
        c = src[i]
        if c in WHITESPACE:
            i += 1
            continue
        if src.startswith("--", i):
            m = _LINE_COMMENT.match(src, i)
            if m:
                i = m.end()
                continue
            # no newline after it: not a comment; JavaCC backs off to the "-" token
        if src.startswith("/*", i):
            m = _BLOCK_COMMENT.match(src, i)
            if not m:
                raise FilterSyntaxError("unterminated comment '/*'", i, src)
            i = m.end()
            continue
        if c == "'":
            m = _STRING.match(src, i)
            if not m:
                raise FilterSyntaxError("unterminated string literal (a quote inside is written '')", i, src)
            out.append(Token(Kind.STRING, m.group(), i))
            i = m.end()
            continue
        if c.isascii() and (c.isdigit() or c == "."):
            d = _DECIMAL.match(src, i)
            f = _FLOAT.match(src, i)
            dl = d.end() - i if d else 0
            fl = f.end() - i if f else 0
            if dl or fl:
                if dl >= fl:
                    assert d is not None
                    out.append(Token(Kind.DECIMAL, d.group(), i))
                else:
                    assert f is not None
                    out.append(Token(Kind.FLOAT, f.group(), i))
                i += max(dl, fl)
                continue
        m = _ID.match(src, i)
        if m:
            word = m.group()
            up = word.upper()
            if up in KEYWORDS:
                out.append(Token(Kind.KEYWORD, up, i))
            else:
                out.append(Token(Kind.ID, word, i))
            i = m.end()
            continue
        for op in OPERATORS:
            if src.startswith(op, i):
                out.append(Token(Kind.OP, op, i))
                i += len(op)
                break
        else:
            raise FilterSyntaxError(f"unexpected character {c!r}", i, src)
    out.append(Token(Kind.EOF, "", n))
    return out


def decode_string(image: str) -> str:
    """The value of a string literal: strip the quotes, '' stands for one quote."""
    return image[1:-1].replace("''", "'")

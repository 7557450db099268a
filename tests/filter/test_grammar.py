"""The SQL92 selector, table-driven: what parses, what is refused (and where), and what each valid
expression evaluates to against message properties — RocketMQ's three-valued logic (None is SQL's
unknown), its type conversions, and its quirks (rocketmq-filter: SelectorParser.jj,
ComparisonExpression, UnaryExpression, LogicExpression)."""

from __future__ import annotations

import pytest

from tidalmq.filter import EvaluationError, FilterSyntaxError, build, compile_sql92, matcher, parse
from tidalmq.filter.nodes import render

ERR = "evaluation error"  # RocketMQ throws; the broker treats the message as not matching

# (expression, properties, expected value of the whole expression)
EVALUATION = [
    # = and <> on strings and numbers
    ("a = 3", {"a": "3"}, True),
    ("a = 3", {"a": "4"}, False),
    ("a = 3", {"a": "+3"}, True),
    ("a = 3", {}, None),  # missing property: unknown
    ("a = 3", {"a": "abc"}, ERR),  # Integer.valueOf("abc")
    ("a = 3", {"a": "3.0"}, ERR),  # an integer literal wants an integer
    ("a = 3.0", {"a": "3"}, True),  # Double.valueOf("3")
    ("a = '3'", {"a": "3"}, True),
    ("a = '3'", {"a": "03"}, False),  # strings compare as strings
    ("a = 'it''s'", {"a": "it's"}, True),
    ("a <> 'x'", {"a": "y"}, True),
    ("a <> 'x'", {"a": "x"}, False),
    ("a <> 'x'", {}, None),  # NOT unknown
    ("'x' = a", {}, False),  # RocketMQ: constant = missing is false, not unknown ...
    ("'x' <> a", {}, True),  # ... so its negation is true
    ("a <> 3", {"a": "abc"}, ERR),
    ("a = b", {"a": "3.14", "b": "3.14"}, True),
    ("a = b", {"a": "x"}, False),  # the same asymmetry between two properties
    ("a = b", {"b": "x"}, None),
    ("a = -3", {"a": "-3"}, True),
    ("a = 1L", {"a": "1"}, True),
    ("1 = 1.0", {}, True),
    ("'1' = 1", {}, True),
    ("1 = TRUE", {}, False),  # number vs boolean: never equal
    ("'abc' = TRUE", {}, False),  # Boolean.valueOf("abc") is false
    ("a = TRUE", {"a": "true"}, True),
    ("a = TRUE", {"a": "TRUE"}, True),
    ("a = TRUE", {"a": "yes"}, False),
    ("TRUE = TRUE", {}, True),
    ("TRUE = FALSE", {}, False),
    ("(a > 1) = TRUE", {"a": "2"}, True),
    ("(a > 1) = 'x'", {"a": "2"}, ERR),  # Java casts the Boolean to String
    ("NOT a = 1", {"a": "x"}, False),  # (NOT a) = 1: a boolean is never equal to a number
    ("-a = -3", {"a": "3"}, None),  # negating a string property gives null
    # ordering: numbers only, a string property is parsed as the literal's type
    ("a > 5", {"a": "10"}, True),
    ("a > 5", {"a": "5"}, False),
    ("a >= 5", {"a": "5"}, True),
    ("a < 5", {"a": "-7"}, True),
    ("a <= 5", {"a": "+5"}, True),
    ("a > 5", {}, None),
    ("a > 5", {"a": "5.5"}, ERR),  # Integer.valueOf("5.5")
    ("a > 5", {"a": " 6"}, ERR),  # no blanks in an integer
    ("a > 5", {"a": "3000000000"}, ERR),  # not an Integer ...
    ("a > 2147483647", {"a": "2147483648"}, ERR),  # ... the literal fits an int, so the property must
    ("a > 2147483648", {"a": "2147483649"}, True),  # a Long literal: Long.valueOf
    ("a > 5.0", {"a": "5.5"}, True),
    ("a > 5.5", {"a": " 6 "}, True),  # Double.valueOf trims
    ("a > 1.5", {"a": "2f"}, True),
    ("a > 1.5", {"a": "1e1"}, True),
    ("a > 1.5", {"a": "0x1p4"}, True),
    ("a > 1.5", {"a": "Infinity"}, True),
    ("a > 1.5", {"a": "NaN"}, True),  # Double.compareTo puts NaN above everything
    ("a < 1.5", {"a": "NaN"}, False),
    ("a > 1.5", {"a": "1,5"}, ERR),
    ("a > b", {"a": "2", "b": "10"}, False),  # two strings: compared as doubles, not as text
    ("a > b", {"a": "x", "b": "1"}, ERR),
    ("a > b", {"a": "2"}, None),
    ("a > -5", {"a": "-4"}, True),
    ("-5 < a", {"a": "-4"}, True),
    ("a > -b", {"a": "1", "b": "2"}, None),  # -b is null: b is a string, not a number
    # BETWEEN / NOT BETWEEN (inclusive bounds)
    ("a BETWEEN 1 AND 10", {"a": "1"}, True),
    ("a BETWEEN 1 AND 10", {"a": "10"}, True),
    ("a BETWEEN 1 AND 10", {"a": "11"}, False),
    ("a BETWEEN 1 AND 10", {}, None),
    ("a BETWEEN 1 AND 10", {"a": "x"}, ERR),
    ("a BETWEEN -5 AND -1", {"a": "-3"}, True),
    ("a BETWEEN 1 AND 1", {"a": "1"}, True),
    ("a BETWEEN 0.5 AND 1.5", {"a": "1.25"}, True),
    ("a NOT BETWEEN 1 AND 10", {"a": "0"}, True),
    ("a NOT BETWEEN 1 AND 10", {"a": "5"}, False),
    ("a NOT BETWEEN 1 AND 10", {}, None),
    ("a NOT BETWEEN 10 AND 1", {"a": "5"}, True),  # no order check for NOT BETWEEN
    ("a between up and low", {"a": "3.14"}, None),
    # IN / NOT IN (string members)
    ("a IN ('x', 'y')", {"a": "y"}, True),
    ("a IN ('x', 'y')", {"a": "z"}, False),
    ("a IN ('x', 'y')", {}, None),
    ("a NOT IN ('x', 'y')", {"a": "z"}, True),
    ("a NOT IN ('x', 'y')", {"a": "x"}, False),
    ("a NOT IN ('x', 'y')", {}, None),
    ("a IN ('1')", {"a": "1"}, True),
    ("a in ('3', '4', '5', '6', '7', '8')", {"a": "7"}, True),
    ("a not in ('4', '4', '5') and b between 3 and 10", {"a": "3", "b": "3"}, True),
    # IS NULL / IS NOT NULL
    ("a IS NULL", {}, True),
    ("a IS NULL", {"a": "1"}, False),
    ("a IS NOT NULL", {}, False),
    ("a IS NOT NULL", {"a": "1"}, True),
    ("5 IS NULL", {}, False),
    ("NULL IS NULL", {}, True),
    # AND / OR / NOT, three-valued, and precedence
    ("a = 1 OR b = 2", {"b": "2"}, True),  # unknown OR true
    ("a = 1 OR b = 2", {"b": "3"}, None),  # unknown OR false
    ("a = 1 AND b = 2", {"b": "3"}, False),  # unknown AND false
    ("a = 1 AND b = 2", {"b": "2"}, None),  # unknown AND true
    ("NOT (a = 1)", {}, None),
    ("NOT (a = 1)", {"a": "2"}, True),
    ("NOT NOT (a = 1)", {"a": "1"}, True),
    ("a = 1 OR b = 2 AND c = 3", {"a": "1"}, True),  # AND binds tighter
    ("(a = 1 OR b = 2) AND c = 3", {"a": "1"}, None),
    ("(a = 1 OR b = 2) AND c = 3", {"a": "1", "c": "4"}, False),
    ("(a = 1 OR b = 2) AND c = 3", {"b": "2", "c": "3"}, True),
    ("a IS NOT NULL AND (a > 100) OR (b IS NULL)", {"a": "50"}, True),
    ("a IS NOT NULL AND a > 100", {"a": "abc"}, ERR),  # the guard does not stop the error
    ("a IS NULL OR a = 'hello'", {}, True),
    ("TRUE", {}, True),
    ("FALSE", {}, False),
    ("NULL", {}, None),
    ("a", {"a": "true"}, False),  # a property as a condition: only a Boolean value is true
    ("a", {}, None),
    ("NOT a", {"a": "true"}, True),
    # TAGS is a property like the others; names are case-sensitive, keywords are not
    ("TAGS = 'TagA'", {"TAGS": "TagA"}, True),
    ("tags = 'TagA'", {"TAGS": "TagA"}, None),
    ("(TAGS is not null and TAGS in ('TagA', 'TagB')) and (a is not null and a between 0 and 3)",
     {"TAGS": "TagB", "a": "2"}, True),
    ("TAGS is not null and TAGS='''''tag'''''", {"TAGS": "''tag''"}, True),
    ("a between 1 and 2 or b is null", {}, True),
    ("$a_1 = 'x'", {"$a_1": "x"}, True),
    ("a <= now", {"a": "1", "now": "2"}, True),  # NOW is just a property name
    # CONTAINS / STARTSWITH / ENDSWITH (RocketMQ 5): false for null, non-strings and ''
    ("a CONTAINS 'x'", {"a": "axb"}, True),
    ("a STARTSWITH 'ax'", {"a": "axb"}, True),
    ("a ENDSWITH 'xb'", {"a": "axb"}, True),
    ("a NOT CONTAINS 'x'", {"a": "axb"}, False),
    ("a NOT STARTSWITH 'x'", {"a": "abb"}, True),
    ("a CONTAINS 'x'", {}, False),
    ("a NOT CONTAINS 'x'", {}, False),
    ("a CONTAINS ''", {"a": "axb"}, False),
    ("a NOT ENDSWITH ''", {"a": "axb"}, False),
    ("' ' contains ' '", {}, True),
    ("'s' contains '\\'", {}, False),
    # comments and layout
    ("a = 1 -- the rest of the line\n", {"a": "1"}, True),
    ("/* why */ a = 1", {"a": "1"}, True),
    ("a=3  and\tb<>4\nAnd c>5 AND d<=4", {"a": "3", "b": "5", "c": "6", "d": "4"}, True),
    ("a > --5", {"a": "6"}, True),  # no newline after "--": two minus signs
]

# (expression, position of the error, a word of the reason)
INVALID = [
    ("", 0, "empty"),
    ("   ", 0, "empty"),
    ("a =", 3, "expected"),
    ("a = 1 AND", 9, "expected"),
    ("a and between 2 and 10", 6, "BETWEEN"),
    ("a = NULL", 4, "NULL"),
    ("NULL = a", 0, "NULL"),
    ("a <> NULL", 5, "NULL"),
    ("a > 'abc'", 4, "cannot be compared"),
    ("'a' > 1", 0, "cannot be compared"),
    ("a > TRUE", 4, "cannot be compared"),
    ("a > NULL", 4, "cannot be compared"),
    ("(a > 1) > 2", 1, "cannot be compared"),
    ("NOT a > 1", 0, "cannot be compared"),  # NOT binds tighter than >: (NOT a) > 1
    ("a BETWEEN 10 AND 1", 10, "less than or equal"),
    ("a between 10 and 0", 10, "less than or equal"),
    ("a BETWEEN 'x' AND 'y'", 10, "cannot be compared"),
    ("a BETWEEN 1 AND 'x'", 10, "BETWEEN"),
    ("a BETWEEN NULL AND 1", 10, "NULL"),
    ("a BETWEEN 1 OR 2", 12, "AND"),
    ("a IN (1, 2)", 6, "string literal"),
    ("a IN ()", 6, "string literal"),
    ("a IN 'x'", 5, "'('"),
    ("a IN ('x'", 9, "')'"),
    ("5 IN ('a')", 0, "property"),
    ("NOT 5", 4, "boolean"),
    ("5", 0, "boolean"),
    ("'abc'", 0, "boolean"),
    ("a AND 5", 6, "boolean"),
    ("-a", 0, "boolean"),
    ("TRUE = 1", 0, "cannot be compared"),
    ("a > 0.0", 4, "4.9E-324"),
    ("a > 1e400", 4, "greater than"),
    ("a > 100000000000000000000000", 4, "long"),
    ("a > 9223372036854775808", 4, "long"),
    ("a != 1", 2, "'!'"),
    ("a == 1", 3, "expected"),
    ("a = 'abc", 4, "unterminated string"),
    ("a = 1 /* x", 6, "unterminated comment"),
    ("(a = 1", 6, "')'"),
    ("a = 1)", 5, "after a complete expression"),  # RocketMQ ignores the rest; we refuse it
    ("a = 1 b = 2", 6, "after a complete expression"),
    ("a IS 5", 5, "NULL"),
    ("a IS NOT 5", 9, "NULL"),
    ("a.b = 1", 1, "'.'"),
    ("名 = 1", 0, "unexpected character"),
    ("a contains 1", 11, "string literal"),
    ("a contains x", 11, "string literal"),
    ("'axb' contains ", 15, "string literal"),
    ("a NOT LIKE 'x'", 2, "after a complete expression"),
]


def evaluate(expression: str, props: dict[str, str]) -> object:
    try:
        return build(parse(expression))(props)
    except EvaluationError:
        return ERR


@pytest.mark.parametrize(("expression", "props", "expected"), EVALUATION, ids=[c[0] for c in EVALUATION])
def test_evaluation(expression: str, props: dict[str, str], expected: object) -> None:
    got = evaluate(expression, props)
    assert got == expected and type(got) is type(expected), f"{expression!r} on {props}: {got!r}"
    # A message matches only when the expression is true; unknown and errors are non-matches.
    assert matcher(parse(expression))(props) is (expected is True)


@pytest.mark.parametrize(("expression", "position", "reason"), INVALID, ids=[c[0] or "<empty>" for c in INVALID])
def test_invalid(expression: str, position: int, reason: str) -> None:
    with pytest.raises(FilterSyntaxError) as info:
        parse(expression)
    e = info.value
    assert e.position == position, f"{expression!r}: {e}"
    assert reason in e.reason, f"{expression!r}: {e}"
    assert f"position {position}" in str(e) and f"column {e.column}" in str(e)


@pytest.mark.parametrize(("expression", "tree"), [
    ("a = 1 OR b = 2 AND c = 3", "((a = 1) OR ((b = 2) AND (c = 3)))"),
    ("a = 1 AND b = 2 OR c = 3", "(((a = 1) AND (b = 2)) OR (c = 3))"),
    ("NOT a = 1 AND b > 2", "(((NOT a) = 1) AND (b > 2))"),
    ("a BETWEEN 1 AND 2 AND b = 3", "(((a >= 1) AND (a <= 2)) AND (b = 3))"),
    ("a NOT BETWEEN 1 AND 2", "((a < 1) OR (a > 2))"),
    ("a <> 'x'", "(NOT (a = 'x'))"),
    ("a IS NOT NULL", "(NOT (a IS NULL))"),
    ("a = 'it''s'", "(a = 'it''s')"),
    ("x = 3000000000", "(x = 3000000000)"),
    ("a NOT IN ('x')", "(a NOT IN ('x'))"),
    ("a = 1 = TRUE", "((a = 1) = TRUE)"),
    ("- - 5 < a", "(--5 < a)"),
    ("+5 < a", "(5 < a)"),
])
def test_precedence(expression: str, tree: str) -> None:
    assert render(parse(expression)) == tree


def test_keywords_are_case_insensitive_and_names_are_not() -> None:
    assert render(parse("a Is NoT nUlL aNd A bEtWeEn 1 AnD 2")) == \
        "((NOT (a IS NULL)) AND ((A >= 1) AND (A <= 2)))"
    assert compile_sql92("Tags = 'x' AND TAGS = 'y'").properties == frozenset({"Tags", "TAGS"})


def test_error_position_on_later_lines() -> None:
    with pytest.raises(FilterSyntaxError) as info:
        parse("a = 1\nAND b > 'x'")
    assert (info.value.position, info.value.line, info.value.column) == (14, 2, 9)

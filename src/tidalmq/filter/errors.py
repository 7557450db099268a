"""Errors of the SQL92 filter: a syntax or semantic error found while compiling an expression."""

from __future__ import annotations


class FilterSyntaxError(ValueError):
    """An expression that does not compile. ``position`` is the 0-based character offset of the
    offending token in the expression (``column`` the 1-based column, for people)."""

    def __init__(self, reason: str, position: int, expression: str = "") -> None:
        self.reason = reason
        self.position = position
        self.expression = expression
        super().__init__(self.describe())

    @property
    def line(self) -> int:
        return self.expression.count("\n", 0, self.position) + 1

    @property
    def column(self) -> int:
        return self.position - (self.expression.rfind("\n", 0, self.position) + 1) + 1

    def describe(self) -> str:
        return (f"Invalid SQL92 expression at position {self.position} (line {self.line}, column {self.column}): "
                f"{self.reason}")


class EvaluationError(Exception):
    """Evaluation failed on one message (RocketMQ throws and the broker treats it as no match):
    a property that is not a number compared with ``>``, a value that does not convert, and so on."""

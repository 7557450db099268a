"""SQL92 message filtering as RocketMQ defines it (rocketmq-filter): a tokenizer and a
recursive-descent parser of the selector grammar, RocketMQ's NULL and type-conversion semantics,
and a compiler to closures evaluated against a message's properties. Pure: no sockets, no store."""

from tidalmq.filter.compiled import SQL92, TAG, CompiledFilter, FilterCache, compile_sql92
from tidalmq.filter.errors import EvaluationError, FilterSyntaxError
from tidalmq.filter.evaluator import build, matcher
from tidalmq.filter.parser import parse

__all__ = [
    "SQL92", "TAG", "CompiledFilter", "EvaluationError", "FilterCache", "FilterSyntaxError", "build",
    "compile_sql92", "matcher", "parse",
]

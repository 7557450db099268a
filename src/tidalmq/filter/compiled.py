"""A compiled subscription expression and the bounded cache of them (the broker's side of
RocketMQ's ConsumerFilterManager / SelectorParser cache)."""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from tidalmq.common.message import decode_java_properties, java_property_reader
from tidalmq.filter.errors import EvaluationError, FilterSyntaxError
from tidalmq.filter.evaluator import build, matcher
from tidalmq.filter.nodes import Node, properties_of, render
from tidalmq.filter.parser import parse
from tidalmq.filter.properties import properties_bytes

log = logging.getLogger(__name__)

SQL92 = "SQL92"
TAG = "TAG"
# Above this many referenced names, decoding the whole section beats one search per name.
_LOOKUP_LIMIT = 4


@dataclass(eq=False)
class CompiledFilter:
    expression: str
    tree: Node
    properties: frozenset[str]
    matches: Callable[[Mapping[str, str]], bool] = field(repr=False)
    record_filter: Callable[[int, memoryview], bool] = field(repr=False)

    def __str__(self) -> str:
        return render(self.tree)


def compile_sql92(expression: str) -> CompiledFilter:
    """Parse and compile a SQL92 selector. Raises ``FilterSyntaxError``."""
    tree = parse(expression)
    names = frozenset(properties_of(tree))
    matches = matcher(tree)
    evaluate = build(tree)
    if not names:
        verdict = matches({})

        def record_filter(tags_code: int, record: memoryview) -> bool:
            return verdict
    elif len(names) <= _LOOKUP_LIMIT:
        read = java_property_reader(names)

        def record_filter(tags_code: int, record: memoryview) -> bool:
            try:
                return evaluate(read(properties_bytes(record))) is True
            except EvaluationError:
                return False
    else:
        def record_filter(tags_code: int, record: memoryview) -> bool:
            return matches(decode_java_properties(properties_bytes(record)))
    return CompiledFilter(expression, tree, names, matches, record_filter)


class FilterCache:
    """Compiled expressions by (type, text), least recently used out first. Failures are cached too,
    so a consumer that keeps pulling with a bad expression costs one parse."""

    def __init__(self, capacity: int = 1024) -> None:
        self.capacity = capacity
        self._items: OrderedDict[tuple[str, str], CompiledFilter | FilterSyntaxError] = OrderedDict()
        self._lock = threading.Lock()
        self.compiles = 0

    def get(self, expression_type: str, expression: str) -> CompiledFilter:
        """The compiled filter; raises ``FilterSyntaxError`` (also for an unknown expression type)."""
        key = (expression_type, expression)
        with self._lock:
            item = self._items.get(key)
            if item is not None:
                self._items.move_to_end(key)
        if item is None:
            self.compiles += 1
            if expression_type != SQL92:
                item = FilterSyntaxError(f"expression type {expression_type!r} is not supported (only TAG and "
                                         f"SQL92 are)", 0, expression)
            else:
                try:
                    item = compile_sql92(expression)
                except FilterSyntaxError as e:
                    log.warning("SQL92 expression %r refused: %s", expression, e)
                    item = e
            with self._lock:
                self._items[key] = item
                while len(self._items) > self.capacity:
                    self._items.popitem(last=False)
        if isinstance(item, FilterSyntaxError):
            raise item
        return item

    def __len__(self) -> int:
        return len(self._items)

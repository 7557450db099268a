"""The broker's side of SQL92 subscriptions (enablePropertyFilter; docs/filtering.md): each expression
compiled once, checked before a pull or pop is served, and evaluated on each candidate record's properties
(RocketMQ's ExpressionMessageFilter)."""

from __future__ import annotations

from collections.abc import Callable

from tidalmq.broker.client.consumer_manager import SubscriptionData
from tidalmq.broker.config import BrokerConfig
from tidalmq.filter import FilterCache, FilterSyntaxError


class ExpressionFilters:
    def __init__(self, config: BrokerConfig) -> None:
        self.config = config  # enablePropertyFilter is read at each request
        self.cache = FilterCache()

    def message_filter(self, sub: SubscriptionData) -> Callable[[int, memoryview], bool] | None:
        """The CommitLog-level filter of a subscription, so unmatched messages never leave the broker. None
        for tag subscriptions (the ConsumeQueue tag-hash filter does those) and when enablePropertyFilter
        is off."""
        if sub.expression_type in ("", "TAG") or not self.config.enable_property_filter:
            return None
        try:
            return self.cache.get(sub.expression_type, sub.sub_string).record_filter
        except FilterSyntaxError:
            # check_expression refuses the pull before any read; were it skipped, deliver nothing, not all
            return lambda tags_code, record: False

    def check_expression(self, sub: SubscriptionData) -> str | None:
        """Why a non-TAG subscription cannot be served (position and reason), or None if it can."""
        if not self.config.enable_property_filter:
            return f"The broker does not support consumer to filter message by {sub.expression_type}"
        try:
            self.cache.get(sub.expression_type, sub.sub_string)
        except FilterSyntaxError as e:
            return str(e)
        return None

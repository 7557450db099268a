"""Subscriptions' expressions on the broker's side (RocketMQ's broker/filter)."""

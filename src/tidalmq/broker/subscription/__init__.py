"""Subscription groups: the SubscriptionGroupManager (RocketMQ's broker/subscription)."""

"""The broker's clients: consumer groups and their channels, rebalance locks (RocketMQ's broker/client)."""

"""The broker's Prometheus metrics (RocketMQ's broker/metrics)."""

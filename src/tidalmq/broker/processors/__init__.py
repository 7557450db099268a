"""Request processors, one module per concern, as RocketMQ's broker/processor package."""

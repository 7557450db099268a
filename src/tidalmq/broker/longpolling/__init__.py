"""Long polling: pulls held until a message arrives (RocketMQ's broker/longpolling)."""

"""Consumer offsets: the ConsumerOffsetManager and what the groups have consumed (RocketMQ's broker/offset)."""

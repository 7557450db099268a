"""Topic and group attributes (RocketMQ's common/attribute)."""

"""A slave's copy of its master's metadata: SlaveSynchronize (RocketMQ's broker/slave)."""

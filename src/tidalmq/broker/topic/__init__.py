"""Topic configuration: TopicConfig and the TopicConfigManager (RocketMQ's broker/topic)."""

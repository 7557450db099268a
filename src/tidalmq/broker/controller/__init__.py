"""Controller mode on the broker's side: the ReplicasManager (RocketMQ's broker/controller)."""

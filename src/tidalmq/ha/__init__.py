"""Master/slave CommitLog replication (RocketMQ's store/ha): docs/replication.md."""

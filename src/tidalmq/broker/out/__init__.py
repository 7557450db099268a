"""The broker's outgoing calls to the NameServers (RocketMQ's broker/out)."""

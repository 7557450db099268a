"""The Broker: request processors over the store, topic/group config, offsets, long polling."""

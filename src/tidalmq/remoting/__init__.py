"""RocketMQ remoting protocol: a pure codec of RemotingCommand frames and an asyncio transport."""

"""The RocketMQ 5 gRPC endpoint (apache.rocketmq.v2.MessagingService) in front of NameServer and brokers."""

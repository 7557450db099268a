"""The RocketMQ 5 gRPC endpoint (apache.rocketmq.v2.MessagingService) in front of NameServer and brokers.

The protocol's messages are TidalMQ's own (tidalmq.proxy.protocol, compiled from its .proto files), in a
descriptor pool of their own: the endpoint needs no RocketMQ client installed, and runs beside the
official 5.x Python client in one process."""

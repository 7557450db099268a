"""RocketMQ 5's gRPC protocol (apache.rocketmq.v2): ``definition.proto`` and ``service.proto``, and the
modules protoc generates from them (``definition_pb2``, ``service_pb2``, ``service_pb2_grpc``), which
scripts/gen_grpc_protocol.py regenerates; tests/grpc/test_protocol_definition.py checks that they are
up to date and that they say what the official 5.x client's copy of the protocol says."""

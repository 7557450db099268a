"""The descriptor pool that holds TidalMQ's apache.rocketmq.v2 messages.

The official 5.x Python client registers the same protocol, under the same full names, in protobuf's
default pool; a second registration there fails ("duplicate symbol"), so a process could not run the
endpoint and that client together. The generated modules beside this one add their files to this pool
instead (scripts/gen_grpc_protocol.py writes them so). It holds the well-known types they import too,
and fields of those types take this pool's ``Duration`` (below) and Timestamp, not google.protobuf's:
set them with their own helpers (``FromMilliseconds``) or with such an instance."""

from __future__ import annotations

from google.protobuf import descriptor_pool, duration_pb2, message_factory, timestamp_pb2

POOL = descriptor_pool.DescriptorPool()
for _wkt in (duration_pb2, timestamp_pb2):
    POOL.AddSerializedFile(_wkt.DESCRIPTOR.serialized_pb)

Duration = message_factory.GetMessageClass(POOL.FindMessageTypeByName("google.protobuf.Duration"))

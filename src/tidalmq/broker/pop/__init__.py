"""Pop consumption (RocketMQ 5): POP_MESSAGE, ACK_MESSAGE, CHANGE_MESSAGE_INVISIBLETIME, NOTIFICATION.

``service.PopService`` holds the logic as async methods (the gRPC endpoint calls it directly);
``processors`` is the thin remoting layer; ``revive.PopReviveService`` brings back what was not acked.
See docs/pop.md.
"""

"""QueryRoute and QueryAssignment (RocketMQ's proxy RouteActivity)."""

from __future__ import annotations

import grpc
from tidalmq.client import validators
from tidalmq.client.instance import ClientInstance
from tidalmq.proxy import auth, convert
from tidalmq.proxy.access import AccessCheck
from tidalmq.proxy.metadata import ProxyMetadata
from tidalmq.proxy.protocol import definition_pb2 as pb
from tidalmq.proxy.protocol import service_pb2 as sv
from tidalmq.proxy.response import error_status, status, topic_not_found


class RouteActivity:
    def __init__(self, instance: ClientInstance, metadata: ProxyMetadata, access: AccessCheck) -> None:
        self.instance = instance
        self.metadata = metadata
        self.access = access

    async def query_route(self, request: sv.QueryRouteRequest, context: grpc.aio.ServicerContext
                          ) -> sv.QueryRouteResponse:
        topic = request.topic.name
        if (refused := self.access.refusal(context, auth.route_needs(topic))) is not None:
            return sv.QueryRouteResponse(status=refused)
        try:
            validators.check_topic(topic)
            route = await self.instance.update_route(topic)
        except Exception as e:
            return sv.QueryRouteResponse(status=error_status(e))
        if route is None or not route.queue_datas:
            return sv.QueryRouteResponse(status=topic_not_found(topic))
        accepted = convert.accept_message_types(await self.metadata.topic_type(topic, route.queue_datas))
        out = sv.QueryRouteResponse(status=status())
        for qd in route.queue_datas:
            perm, reads, writes = int(qd.get("perm", 6)), int(qd["readQueueNums"]), int(qd["writeQueueNums"])
            broker = pb.Broker(name=qd["brokerName"], id=0, endpoints=request.endpoints)
            for i in range(max(reads, writes)):
                readable, writable = i < reads and bool(perm & 4), i < writes and bool(perm & 2)
                permission = (pb.Permission.READ_WRITE if readable and writable else pb.Permission.READ if readable
                              else pb.Permission.WRITE if writable else pb.Permission.NONE)
                out.message_queues.add(topic=request.topic, id=i, permission=permission, broker=broker,
                                       accept_message_types=accepted)
        return out

    async def query_assignment(self, request: sv.QueryAssignmentRequest, context: grpc.aio.ServicerContext
                               ) -> sv.QueryAssignmentResponse:
        """Pop needs no queue balancing: each broker with readable queues is one assignment (queue id -1)."""
        topic = request.topic.name
        if (refused := self.access.refusal(context, auth.consume_needs(topic, request.group.name))) is not None:
            return sv.QueryAssignmentResponse(status=refused)
        try:
            route = await self.instance.update_route(topic)
        except Exception as e:
            return sv.QueryAssignmentResponse(status=error_status(e))
        if route is None or not route.queue_datas:
            return sv.QueryAssignmentResponse(status=topic_not_found(topic))
        out = sv.QueryAssignmentResponse(status=status())
        for qd in route.queue_datas:
            if int(qd.get("perm", 6)) & 4 and int(qd["readQueueNums"]) > 0:
                broker = pb.Broker(name=qd["brokerName"], id=0, endpoints=request.endpoints)
                out.assignments.add(message_queue=pb.MessageQueue(  # no accept types: RocketMQ's has none
                    topic=request.topic, id=-1, permission=pb.Permission.READ_WRITE, broker=broker))
        return out

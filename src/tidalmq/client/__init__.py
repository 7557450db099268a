"""TidalMQ's Python client for RocketMQ's remoting protocol: asyncio-native, with a thin synchronous
facade in :mod:`tidalmq.client.sync`. See docs/client.md."""

from tidalmq.acl.signature import SessionCredentials
from tidalmq.client.admin import Admin, AdminError, QueueProgress, QueueStatus
from tidalmq.client.allocate import AllocateByConfig, AllocateStrategy, allocate_averagely, allocate_by_circle
from tidalmq.client.errors import (
    IllegalStateError,
    MQBrokerError,
    MQClientError,
    SendTimeoutError,
    ValidationError,
)
from tidalmq.client.message import (
    ConsumeFromWhere,
    ConsumeResult,
    Message,
    MessageExt,
    MessageModel,
    MessageQueue,
    PullResult,
    PullStatus,
    SendResult,
    SendStatus,
    TransactionSendResult,
    TransactionState,
)
from tidalmq.client.pop_consumer import PopConsumer
from tidalmq.client.producer import Producer, SendCallback
from tidalmq.client.pull_consumer import PullConsumer
from tidalmq.client.push_consumer import MessageListener, PushConsumer
from tidalmq.client.selector import MessageQueueSelector, select_by_hash, select_by_random
from tidalmq.client.transaction_producer import TransactionListener, TransactionProducer
from tidalmq.remoting.tls import client_context as tls_context

__all__ = [
    "Admin", "AdminError", "AllocateByConfig", "AllocateStrategy", "ConsumeFromWhere", "ConsumeResult",
    "IllegalStateError", "MQBrokerError", "MQClientError", "Message", "MessageExt", "MessageListener",
    "MessageModel", "MessageQueue", "MessageQueueSelector", "PopConsumer", "Producer", "PullConsumer", "PullResult", "PullStatus",
    "PushConsumer", "QueueProgress", "QueueStatus", "SendCallback", "SendResult", "SendStatus", "SendTimeoutError",
    "SessionCredentials",
    "TransactionListener", "TransactionProducer", "TransactionSendResult", "TransactionState", "ValidationError",
    "allocate_averagely", "allocate_by_circle", "select_by_hash", "select_by_random", "tls_context",
]

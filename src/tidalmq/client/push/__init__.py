"""The parts of the PushConsumer (tidalmq.client.push_consumer wires them), named after RocketMQ's:

- ``rebalance``: RebalancePushImpl — which queues are this client's, the process queue table, where a
  new queue starts (computePullFromWhere), dropping queues that went elsewhere;
- ``queue_lock``: LOCK_BATCH_MQ / UNLOCK_BATCH_MQ of orderly clustering consumers;
- ``pull_service``: the long-polling pull loop of each queue with its flow control (PullAPIWrapper and
  DefaultMQPushConsumerImpl.pullMessage);
- ``consume_concurrently`` / ``consume_orderly``: ConsumeMessageConcurrentlyService and
  ConsumeMessageOrderlyService;
- ``send_back``: a failed message handed back for a later retry (sendMessageBack and its fallback);
- ``listener``: how the user's listener is called (event loop or thread pool).

Each part takes what it needs explicitly (client instance, offset store, callables), so it can be
tested alone against the fake broker of tests/client/fakes.py or against plain fakes.
"""

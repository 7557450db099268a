// Driven by tests/grpc/test_node.py: the official RocketMQ 5.x Node.js client (rocketmq-client-nodejs,
// pinned in package.json) sends messages to a topic and receives them back with a SimpleConsumer, or with
// a PushConsumer (MODE push: it hands its listener only the messages whose body digest checks out).
// Usage: node agent.js ENDPOINT TOPIC GROUP COUNT [simple|push]. Prints one JSON line: what was sent and
// received.
'use strict';
const { Producer, SimpleConsumer, PushConsumer, ConsumeResult } = require('rocketmq-client-nodejs');

async function receivePush(endpoints, topic, group, count) {
  const received = [];
  let enough;
  const done = new Promise((resolve) => { enough = resolve; });
  const consumer = new PushConsumer({
    endpoints, namespace: '', sslEnabled: false, consumerGroup: group,
    subscriptions: new Map().set(topic, 'node'),
    messageListener: {
      consume(m) {
        received.push({ id: m.messageId, body: m.body.toString(), tag: m.tag, keys: m.keys });
        if (received.length >= count) enough();
        return ConsumeResult.SUCCESS;
      },
    },
  });
  await consumer.startup();
  await Promise.race([done, new Promise((resolve) => setTimeout(resolve, 30000))]);
  await consumer.shutdown();
  return received;
}

async function main() {
  const [endpoints, topic, group, countText, mode] = process.argv.slice(2);
  const count = Number(countText);
  const producer = new Producer({ endpoints, namespace: '', sslEnabled: false });
  await producer.startup();
  const sent = [];
  for (let i = 0; i < count; i++) {
    const receipt = await producer.send({ topic, tag: 'node', keys: [ `k${i}` ], body: Buffer.from(`node ${i}`) });
    sent.push(receipt.messageId);
  }
  if (mode === 'push') {
    const received = await receivePush(endpoints, topic, group, count);
    console.log(JSON.stringify({ sent, received }));
    await producer.shutdown();
    return;
  }
  const consumer = new SimpleConsumer({
    endpoints, namespace: '', sslEnabled: false, consumerGroup: group,
    subscriptions: new Map().set(topic, 'node'), awaitDuration: 1000,
  });
  await consumer.startup();
  const received = [];
  const deadline = Date.now() + 20000;
  while (received.length < count && Date.now() < deadline) {
    for (const m of await consumer.receive(16, 15000)) {
      received.push({ id: m.messageId, body: m.body.toString(), tag: m.tag, keys: m.keys });
      await consumer.ack(m);
    }
  }
  console.log(JSON.stringify({ sent, received }));
  await consumer.shutdown();
  await producer.shutdown();
}

main().then(() => process.exit(0), (e) => { console.error(e); process.exit(1); });

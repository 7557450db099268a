package tidalmq.ref;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CopyOnWriteArrayList;
import org.apache.rocketmq.client.apis.ClientConfiguration;
import org.apache.rocketmq.client.apis.ClientException;
import org.apache.rocketmq.client.apis.ClientServiceProvider;
import org.apache.rocketmq.client.apis.consumer.ConsumeResult;
import org.apache.rocketmq.client.apis.consumer.FilterExpression;
import org.apache.rocketmq.client.apis.consumer.FilterExpressionType;
import org.apache.rocketmq.client.apis.consumer.PushConsumer;
import org.apache.rocketmq.client.apis.consumer.SimpleConsumer;
import org.apache.rocketmq.client.apis.message.Message;
import org.apache.rocketmq.client.apis.message.MessageBuilder;
import org.apache.rocketmq.client.apis.message.MessageView;
import org.apache.rocketmq.client.apis.producer.Producer;
import org.apache.rocketmq.client.apis.producer.ProducerBuilder;
import org.apache.rocketmq.client.apis.producer.SendReceipt;
import org.apache.rocketmq.client.apis.producer.Transaction;
import org.apache.rocketmq.client.apis.producer.TransactionResolution;

/**
 * The official 5.x Java client as a user writes it, one scenario a run: Client5 ENDPOINT SCENARIO TOPIC GROUP.
 * Prints one JSON object a line (an observation); the last line is {"done": SCENARIO}. Driven by
 * tests/reference/test_java5_client.py against Apache RocketMQ's proxy and TidalMQ's gRPC endpoint.
 */
public final class Client5 {
    private static final ClientServiceProvider PROVIDER = ClientServiceProvider.loadService();
    private static final FilterExpression ALL = new FilterExpression("*", FilterExpressionType.TAG);

    private Client5() {
    }

    public static void main(String[] args) throws Exception {
        String endpoint = args[0];
        String scenario = args[1];
        String topic = args[2];
        String group = args[3];
        ClientConfiguration conf = ClientConfiguration.newBuilder().setEndpoints(endpoint).enableSsl(false)
            .setRequestTimeout(Duration.ofSeconds(10)).build();
        switch (scenario) {
            case "normal": normal(conf, topic, group); break;
            case "fifo": fifo(conf, topic, group); break;
            case "delay": delay(conf, topic, group); break;
            case "transaction": transaction(conf, topic, group); break;
            case "invisible": invisible(conf, topic, group); break;
            case "push": push(conf, topic, group); break;
            case "recall": recall(conf, topic, group); break;
            case "drain": drain(conf, topic, group, args[4]); break;
            case "wrongtype": wrongType(conf, topic); break;
            default: throw new IllegalArgumentException(scenario);
        }
        emit(map("done", scenario));
        System.exit(0);
    }

    private static Producer producer(ClientConfiguration conf, String... topics) throws ClientException {
        return PROVIDER.newProducerBuilder().setClientConfiguration(conf).setTopics(topics).build();
    }

    private static SimpleConsumer simple(ClientConfiguration conf, String group, Map<String, FilterExpression> subs)
        throws ClientException {
        return PROVIDER.newSimpleConsumerBuilder().setClientConfiguration(conf).setConsumerGroup(group)
            .setSubscriptionExpressions(subs).setAwaitDuration(Duration.ofSeconds(5)).build();
    }

    private static MessageBuilder message(String topic, String body) {
        return PROVIDER.newMessageBuilder().setTopic(topic).setBody(body.getBytes(StandardCharsets.UTF_8));
    }

    /** What a consumer sees of a message, the fields that do not change from run to run. */
    private static Map<String, Object> view(MessageView m) {
        Map<String, Object> out = map("event", "received");
        out.put("id", m.getMessageId().toString());
        out.put("topic", m.getTopic());
        out.put("body", StandardCharsets.UTF_8.decode(m.getBody().duplicate()).toString());
        out.put("tag", m.getTag().orElse(null));
        List<String> keys = new ArrayList<>(m.getKeys());
        Collections.sort(keys);
        out.put("keys", keys);
        out.put("properties", new java.util.TreeMap<>(m.getProperties()));
        out.put("group", m.getMessageGroup().orElse(null));
        out.put("deliveryTimestamp", m.getDeliveryTimestamp().orElse(null));
        out.put("attempt", m.getDeliveryAttempt());
        out.put("bornHostSet", !m.getBornHost().isEmpty());
        out.put("bornTimestampSet", m.getBornTimestamp() > 0);
        out.put("at", System.currentTimeMillis());
        return out;
    }

    private static Map<String, Object> sent(SendReceipt r, String body) {
        Map<String, Object> out = map("event", "sent");
        out.put("id", r.getMessageId().toString());
        out.put("body", body);
        out.put("at", System.currentTimeMillis());
        return out;
    }

    /** Receives until ``want`` messages were acked or ``timeoutMs`` passed. */
    private static List<MessageView> receiveAll(SimpleConsumer c, int want, long timeoutMs) throws ClientException {
        List<MessageView> got = new ArrayList<>();
        long deadline = System.currentTimeMillis() + timeoutMs;
        while (got.size() < want && System.currentTimeMillis() < deadline) {
            for (MessageView m : c.receive(16, Duration.ofSeconds(20))) {
                got.add(m);
                c.ack(m);
            }
        }
        return got;
    }

    private static void normal(ClientConfiguration conf, String topic, String group) throws Exception {
        try (Producer p = producer(conf, topic)) {
            for (int i = 0; i < 3; i++) {
                Message m = message(topic, "normal " + i).setTag("TagA").setKeys("k" + i, "common")
                    .addProperty("color", "blue").build();
                emit(sent(p.send(m), "normal " + i));
            }
        }
        try (SimpleConsumer c = simple(conf, group, Collections.singletonMap(topic, ALL))) {
            for (MessageView m : receiveAll(c, 3, 30_000)) {
                emit(view(m));
            }
        }
    }

    private static void fifo(ClientConfiguration conf, String topic, String group) throws Exception {
        List<String> order = new CopyOnWriteArrayList<>();
        try (Producer p = producer(conf, topic)) {
            for (int i = 0; i < 8; i++) {
                String g = "g" + (i % 2);
                Message m = message(topic, g + "-" + i).setMessageGroup(g).build();
                emit(sent(p.send(m), g + "-" + i));
            }
        }
        try (PushConsumer c = PROVIDER.newPushConsumerBuilder().setClientConfiguration(conf).setConsumerGroup(group)
            .setSubscriptionExpressions(Collections.singletonMap(topic, ALL)).setMessageListener(m -> {
                emit(view(m));
                order.add(m.getMessageGroup().orElse("?"));
                return ConsumeResult.SUCCESS;
            }).build()) {
            waitFor(() -> order.size() >= 8, 40_000);
        }
    }

    private static void delay(ClientConfiguration conf, String topic, String group) throws Exception {
        long deliverAt = System.currentTimeMillis() + 4_000;
        try (Producer p = producer(conf, topic)) {
            Map<String, Object> s = sent(p.send(message(topic, "delay 0").setDeliveryTimestamp(deliverAt).build()),
                "delay 0");
            s.put("deliverAt", deliverAt);
            emit(s);
        }
        try (SimpleConsumer c = simple(conf, group, Collections.singletonMap(topic, ALL))) {
            for (MessageView m : receiveAll(c, 1, 30_000)) {
                emit(view(m));
            }
        }
    }

    private static void transaction(ClientConfiguration conf, String topic, String group) throws Exception {
        Set<String> checked = ConcurrentHashMap.newKeySet();
        ProducerBuilder b = PROVIDER.newProducerBuilder().setClientConfiguration(conf).setTopics(topic)
            .setTransactionChecker(m -> {
                String body = StandardCharsets.UTF_8.decode(m.getBody().duplicate()).toString();
                checked.add(body);
                return body.startsWith("unknown") ? TransactionResolution.COMMIT : TransactionResolution.ROLLBACK;
            });
        try (Producer p = b.build()) {
            for (String body : new String[] {"commit", "rollback", "unknown"}) {
                Transaction tx = p.beginTransaction();
                emit(sent(p.send(message(topic, body).build(), tx), body));
                if (body.equals("commit")) {
                    tx.commit();
                } else if (body.equals("rollback")) {
                    tx.rollback();
                }
            }
            try (SimpleConsumer c = simple(conf, group, Collections.singletonMap(topic, ALL))) {
                for (MessageView m : receiveAll(c, 2, 60_000)) {
                    emit(view(m));
                }
            }
            Map<String, Object> out = map("event", "checked");
            List<String> sorted = new ArrayList<>(checked);
            Collections.sort(sorted);
            out.put("bodies", sorted);
            emit(out);
        }
    }

    /** changeInvisibleDuration: a message received and made visible again in 2 s comes back, its attempt 2. */
    private static void invisible(ClientConfiguration conf, String topic, String group) throws Exception {
        try (Producer p = producer(conf, topic)) {
            emit(sent(p.send(message(topic, "invisible 0").build()), "invisible 0"));
        }
        try (SimpleConsumer c = simple(conf, group, Collections.singletonMap(topic, ALL))) {
            MessageView first = null;
            long deadline = System.currentTimeMillis() + 30_000;
            while (first == null && System.currentTimeMillis() < deadline) {
                List<MessageView> got = c.receive(1, Duration.ofSeconds(60));
                first = got.isEmpty() ? null : got.get(0);
            }
            if (first == null) {
                return;
            }
            emit(view(first));
            long changedAt = System.currentTimeMillis();
            c.changeInvisibleDuration(first, Duration.ofSeconds(2));
            for (MessageView m : receiveAll(c, 1, 30_000)) {
                Map<String, Object> v = view(m);
                v.put("afterChangeMs", System.currentTimeMillis() - changedAt);
                emit(v);
            }
        }
    }

    private static void push(ClientConfiguration conf, String topic, String group) throws Exception {
        Set<String> bodies = ConcurrentHashMap.newKeySet();
        try (PushConsumer c = PROVIDER.newPushConsumerBuilder().setClientConfiguration(conf).setConsumerGroup(group)
            .setSubscriptionExpressions(Collections.singletonMap(topic, ALL)).setMessageListener(m -> {
                Map<String, Object> v = view(m);
                if (bodies.add((String) v.get("body"))) {
                    emit(v);
                }
                return ConsumeResult.SUCCESS;
            }).build()) {
            try (Producer p = producer(conf, topic)) {
                for (int i = 0; i < 10; i++) {
                    emit(sent(p.send(message(topic, "push " + i).setTag("P").build()), "push " + i));
                }
            }
            waitFor(() -> bodies.size() >= 10, 40_000);
        }
    }

    private static void recall(ClientConfiguration conf, String topic, String group) throws Exception {
        try (Producer p = producer(conf, topic)) {
            SendReceipt r = p.send(message(topic, "recalled").setDeliveryTimestamp(System.currentTimeMillis() + 6_000)
                .build());
            emit(sent(r, "recalled"));
            Map<String, Object> out = map("event", "recall");
            out.put("handleSet", r.getRecallHandle() != null && !r.getRecallHandle().isEmpty());
            out.put("id", p.recallMessage(topic, r.getRecallHandle()).getMessageId());
            emit(out);
            emit(sent(p.send(message(topic, "kept").setDeliveryTimestamp(System.currentTimeMillis() + 6_000)
                .build()), "kept"));
        }
        try (SimpleConsumer c = simple(conf, group, Collections.singletonMap(topic, ALL))) {
            // "kept" arrives; "recalled", due at the same time, never does (waited for 4 s after "kept").
            for (MessageView m : receiveAll(c, 1, 30_000)) {
                emit(view(m));
            }
            for (MessageView m : receiveAll(c, 1, 4_000)) {
                emit(view(m));
            }
        }
    }

    /** A NORMAL message to a FIFO topic: the producer (told to check types) or the server refuses it. */
    private static void wrongType(ClientConfiguration conf, String topic) throws Exception {
        try (Producer p = producer(conf, topic)) {
            Map<String, Object> out = map("event", "wrongtype");
            try {
                out.put("id", p.send(message(topic, "wrong").build()).getMessageId().toString());
            } catch (ClientException | IllegalArgumentException e) {
                out.put("error", e.getClass().getSimpleName());
                out.put("message", e.getMessage());
            }
            emit(out);
        }
    }

    /** A SimpleConsumer subscribed to three topics (TOPIC-1..3) drains them; ``counts``: how many messages
     * each gets, "N1,N2,N3". */
    private static void drain(ClientConfiguration conf, String topic, String group, String counts) throws Exception {
        String[] topics = {topic + "-1", topic + "-2", topic + "-3"};
        String[] each = counts.split(",");
        int total = 0;
        try (Producer p = producer(conf, topics)) {
            for (int k = 0; k < topics.length; k++) {
                int n = Integer.parseInt(each[k]);
                total += n;
                for (int i = 0; i < n; i++) {
                    p.send(message(topics[k], topics[k] + " " + i).build());
                }
            }
        }
        Map<String, FilterExpression> subs = new HashMap<>();
        for (String t : topics) {
            subs.put(t, ALL);
        }
        try (SimpleConsumer c = simple(conf, group, subs)) {
            Set<String> bodies = new HashSet<>();
            long start = System.currentTimeMillis();
            long deadline = start + 120_000;
            int receives = 0;
            while (bodies.size() < total && System.currentTimeMillis() < deadline) {
                receives++;
                for (MessageView m : c.receive(32, Duration.ofSeconds(30))) {
                    bodies.add(StandardCharsets.UTF_8.decode(m.getBody().duplicate()).toString());
                    c.ack(m);
                }
            }
            Map<String, Object> out = map("event", "drained");
            out.put("count", bodies.size());
            out.put("ms", System.currentTimeMillis() - start);
            out.put("receives", receives);
            emit(out);
        }
    }

    private interface Condition {
        boolean holds();
    }

    private static void waitFor(Condition c, long timeoutMs) throws InterruptedException {
        long deadline = System.currentTimeMillis() + timeoutMs;
        while (!c.holds() && System.currentTimeMillis() < deadline) {
            Thread.sleep(50);
        }
    }

    private static Map<String, Object> map(String key, Object value) {
        Map<String, Object> m = new LinkedHashMap<>();
        m.put(key, value);
        return m;
    }

    private static synchronized void emit(Map<String, Object> obj) {
        System.out.println(Json.write(obj));
        System.out.flush();
    }
}

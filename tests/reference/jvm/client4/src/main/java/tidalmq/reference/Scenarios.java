package tidalmq.reference;

import static java.nio.charset.StandardCharsets.UTF_8;
import static tidalmq.reference.Client4.describe;
import static tidalmq.reference.Client4.emit;
import static tidalmq.reference.Client4.failure;
import static tidalmq.reference.Client4.group;
import static tidalmq.reference.Client4.litePullConsumer;
import static tidalmq.reference.Client4.producer;
import static tidalmq.reference.Client4.pushConsumer;
import static tidalmq.reference.Client4.result;
import static tidalmq.reference.Client4.topic;

import java.util.ArrayList;
import java.util.Collection;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import org.apache.rocketmq.client.consumer.DefaultLitePullConsumer;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.MessageSelector;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.ConsumeOrderlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.consumer.listener.MessageListenerOrderly;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.LocalTransactionState;
import org.apache.rocketmq.client.producer.SendCallback;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.TransactionListener;
import org.apache.rocketmq.client.producer.TransactionMQProducer;
import org.apache.rocketmq.client.producer.TransactionSendResult;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;
import org.apache.rocketmq.common.protocol.heartbeat.MessageModel;

/** One method a scenario: each uses topics and groups of its own, so that all can run at once. */
final class Scenarios {
    static final long WAIT_S = 60;

    private Scenarios() {
    }

    static void run(String name) throws Exception {
        switch (name) {
            case "send": send(); break;
            case "push": push(); break;
            case "orderly": orderly(); break;
            case "broadcast": broadcast(); break;
            case "filter": filter(); break;
            case "delay": delay(); break;
            case "transaction": transaction(); break;
            case "retry": retry(); break;
            case "bad": bad(); break;
            case "noroute": noroute(); break;
            case "acl": acl(); break;
            case "reset": reset(); break;
            case "moved": Moved.run(); break;
            default: throw new IllegalArgumentException("no scenario " + name);
        }
    }

    static Message msg(String topic, String tags, String keys, String body) {
        return new Message(topic, tags, keys, body.getBytes(UTF_8));
    }

    static void await(CountDownLatch latch, String what) throws InterruptedException {
        if (!latch.await(WAIT_S, TimeUnit.SECONDS)) {
            throw new IllegalStateException("timed out waiting for " + what + " (" + latch.getCount() + " left)");
        }
    }

    /** Sync, async, oneway and batch sends, read back by a DefaultLitePullConsumer. */
    static void send() throws Exception {
        String t = topic("send");
        DefaultMQProducer p = producer("send");
        Message m = msg(t, "TagA", "key-sync", "sync");
        m.putUserProperty("color", "blue");
        emit("send", "sync", result(p.send(m)));
        CompletableFuture<SendResult> async = new CompletableFuture<>();
        p.send(msg(t, "TagA", "key-async", "async"), new SendCallback() {
            @Override
            public void onSuccess(SendResult r) {
                async.complete(r);
            }

            @Override
            public void onException(Throwable e) {
                async.completeExceptionally(e);
            }
        });
        emit("send", "async", result(async.get(WAIT_S, TimeUnit.SECONDS)));
        p.sendOneway(msg(t, "TagA", "key-oneway", "oneway"));
        List<Message> batch = new ArrayList<>();
        for (int i = 0; i < 3; i++) {
            batch.add(msg(t, "TagB", "key-b" + i, "batch" + i));
        }
        emit("send", "batch", result(p.send(batch)));
        p.shutdown();

        DefaultLitePullConsumer c = litePullConsumer("send");
        c.subscribe(t, "*");
        c.start();
        Map<String, Map<String, Object>> seen = new TreeMap<>();
        long deadline = System.currentTimeMillis() + WAIT_S * 1000;
        while (seen.size() < 6 && System.currentTimeMillis() < deadline) {
            for (MessageExt x : c.poll()) {
                seen.put(new String(x.getBody(), UTF_8), describe(x));
            }
        }
        for (Map<String, Object> d : seen.values()) {
            emit("send", "consumed", d);
        }
        c.shutdown();
    }

    static void sendN(String scenario, String t, int n) throws Exception {
        DefaultMQProducer p = producer(scenario);
        for (int i = 0; i < n; i++) {
            p.send(msg(t, "TagA", "k" + i, scenario + i));
        }
        p.shutdown();
    }

    /** DefaultMQPushConsumer, concurrently. */
    static void push() throws Exception {
        String t = topic("push");
        sendN("push", t, 8);
        CountDownLatch latch = new CountDownLatch(8);
        Map<String, Map<String, Object>> seen = new ConcurrentHashMap<>();
        DefaultMQPushConsumer c = pushConsumer("push");
        c.subscribe(t, "*");
        c.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            for (MessageExt x : msgs) {
                if (seen.putIfAbsent(new String(x.getBody(), UTF_8), describe(x)) == null) {
                    latch.countDown();
                }
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        c.start();
        await(latch, "8 messages");
        for (Map<String, Object> d : new TreeMap<>(seen).values()) {
            emit("push", "consumed", d);
        }
        c.shutdown();
    }

    /** Three orders of five steps, each order on the queue its id selects; consumed orderly. */
    static void orderly() throws Exception {
        String t = topic("orderly");
        DefaultMQProducer p = producer("orderly");
        for (int step = 0; step < 5; step++) {
            for (int order = 0; order < 3; order++) {
                SendResult r = p.send(msg(t, "TagA", "order" + order, order + ":" + step),
                    (mqs, m, arg) -> mqs.get((Integer) arg % mqs.size()), order);
                Map<String, Object> f = result(r);
                f.put("order", order);
                emit("orderly", "sent", f);
            }
        }
        p.shutdown();
        CountDownLatch latch = new CountDownLatch(15);
        List<String> arrivals = new CopyOnWriteArrayList<>();
        DefaultMQPushConsumer c = pushConsumer("orderly");
        c.subscribe(t, "*");
        c.registerMessageListener((MessageListenerOrderly) (msgs, ctx) -> {
            for (MessageExt x : msgs) {
                arrivals.add(x.getQueueId() + "/" + new String(x.getBody(), UTF_8));
                latch.countDown();
            }
            return ConsumeOrderlyStatus.SUCCESS;
        });
        c.start();
        await(latch, "15 orderly messages");
        emit("orderly", "arrivals", Map.of("arrivals", new ArrayList<>(arrivals)));
        c.shutdown();
    }

    /** Two consumers of one group in BROADCASTING: each gets every message. */
    static void broadcast() throws Exception {
        String t = topic("broadcast");
        sendN("broadcast", t, 3);
        List<DefaultMQPushConsumer> consumers = new ArrayList<>();
        List<CountDownLatch> latches = new ArrayList<>();
        List<Collection<String>> got = new ArrayList<>();
        for (int i = 0; i < 2; i++) {
            CountDownLatch latch = new CountDownLatch(3);
            Collection<String> bodies = new CopyOnWriteArrayList<>();
            DefaultMQPushConsumer c = pushConsumer("broadcast");
            c.setInstanceName("bc" + i);
            c.setMessageModel(MessageModel.BROADCASTING);
            c.subscribe(t, "*");
            c.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
                for (MessageExt x : msgs) {
                    bodies.add(new String(x.getBody(), UTF_8));
                    latch.countDown();
                }
                return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
            });
            c.start();
            consumers.add(c);
            latches.add(latch);
            got.add(bodies);
        }
        for (CountDownLatch l : latches) {
            await(l, "3 broadcast messages");
        }
        for (int i = 0; i < 2; i++) {
            List<String> sorted = new ArrayList<>(got.get(i));
            sorted.sort(null);
            emit("broadcast", "consumer", Map.of("instance", i, "bodies", sorted));
            consumers.get(i).shutdown();
        }
    }

    /** A tag subscription and an SQL92 one on the same six messages. */
    static void filter() throws Exception {
        String t = topic("filter");
        DefaultMQProducer p = producer("filter");
        String[] tags = {"TagA", "TagB", "TagC"};
        for (int i = 0; i < 6; i++) {
            Message m = msg(t, tags[i % 3], "f" + i, "f" + i);
            m.putUserProperty("a", String.valueOf(i));
            p.send(m);
        }
        p.shutdown();
        Map<String, String> selectors = new TreeMap<>();
        selectors.put("tag", "TagA || TagB");
        selectors.put("sql", "a >= 3");
        Map<String, Integer> expect = Map.of("tag", 4, "sql", 3);
        List<DefaultMQPushConsumer> consumers = new ArrayList<>();
        Map<String, Collection<String>> got = new TreeMap<>();
        List<CountDownLatch> latches = new ArrayList<>();
        for (Map.Entry<String, String> sel : selectors.entrySet()) {
            CountDownLatch latch = new CountDownLatch(expect.get(sel.getKey()));
            Collection<String> bodies = new CopyOnWriteArrayList<>();
            DefaultMQPushConsumer c = pushConsumer("filter" + sel.getKey());
            if (sel.getKey().equals("sql")) {
                c.subscribe(t, MessageSelector.bySql(sel.getValue()));
            } else {
                c.subscribe(t, sel.getValue());
            }
            c.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
                for (MessageExt x : msgs) {
                    bodies.add(new String(x.getBody(), UTF_8));
                    latch.countDown();
                }
                return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
            });
            try {
                c.start();
            } catch (Exception e) {
                emit("filter", "startFailed", Map.of("selector", sel.getKey(), "failure", failure(e)));
                continue;
            }
            consumers.add(c);
            latches.add(latch);
            got.put(sel.getKey(), bodies);
        }
        for (CountDownLatch l : latches) {
            await(l, "filtered messages");
        }
        for (Map.Entry<String, Collection<String>> e : got.entrySet()) {
            List<String> sorted = new ArrayList<>(e.getValue());
            sorted.sort(null);
            emit("filter", "consumer", Map.of("selector", e.getKey(), "bodies", sorted));
        }
        for (DefaultMQPushConsumer c : consumers) {
            c.shutdown();
        }
    }

    /** A level-2 (5 s) delayed message: when it arrives and what it carries. */
    static void delay() throws Exception {
        String t = topic("delay");
        DefaultMQProducer p = producer("delay");
        Message m = msg(t, "TagA", "key-delay", "delayed");
        m.setDelayTimeLevel(2);
        long sentAt = System.currentTimeMillis();
        emit("delay", "sent", result(p.send(m)));
        p.shutdown();
        CountDownLatch latch = new CountDownLatch(1);
        List<Map<String, Object>> got = new CopyOnWriteArrayList<>();
        DefaultMQPushConsumer c = pushConsumer("delay");
        c.subscribe(t, "*");
        c.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            for (MessageExt x : msgs) {
                got.add(describe(x));
                latch.countDown();
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        c.start();
        await(latch, "the delayed message");
        Map<String, Object> d = got.get(0);
        d.put("sentAt", sentAt);
        emit("delay", "consumed", d);
        c.shutdown();
    }

    /** A transaction left UNKNOW by the local transaction and committed by the check-back. */
    static void transaction() throws Exception {
        String t = topic("transaction");
        List<Map<String, Object>> checks = new CopyOnWriteArrayList<>();
        TransactionMQProducer p = new TransactionMQProducer(group("transaction"), Client4.aclHook());
        p.setNamesrvAddr(Client4.namesrv);
        p.setInstanceName("p-transaction");
        p.setTransactionListener(new TransactionListener() {
            @Override
            public LocalTransactionState executeLocalTransaction(Message msg, Object arg) {
                return LocalTransactionState.UNKNOW;
            }

            @Override
            public LocalTransactionState checkLocalTransaction(MessageExt msg) {
                Map<String, Object> d = describe(msg);
                checks.add(d);
                return LocalTransactionState.COMMIT_MESSAGE;
            }
        });
        p.start();
        long sentAt = System.currentTimeMillis();
        TransactionSendResult r = p.sendMessageInTransaction(msg(t, "TagA", "key-tx", "tx"), null);
        Map<String, Object> f = result(r);
        f.put("localTransactionState", r.getLocalTransactionState().name());
        f.put("sentAt", sentAt);
        emit("transaction", "sent", f);
        CountDownLatch latch = new CountDownLatch(1);
        List<Map<String, Object>> got = new CopyOnWriteArrayList<>();
        DefaultMQPushConsumer c = pushConsumer("transaction");
        c.subscribe(t, "*");
        c.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            for (MessageExt x : msgs) {
                got.add(describe(x));
                latch.countDown();
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        c.start();
        await(latch, "the committed message");
        for (Map<String, Object> check : checks) {
            emit("transaction", "checked", check);
        }
        emit("transaction", "consumed", got.get(0));
        c.shutdown();
        p.shutdown();
    }

    /** RECONSUME_LATER twice with maxReconsumeTimes 1: one retry, then the group's %DLQ% topic, read back. */
    static void retry() throws Exception {
        String t = topic("retry");
        sendN("retry", t, 1);
        CountDownLatch twice = new CountDownLatch(2);
        List<Map<String, Object>> deliveries = new CopyOnWriteArrayList<>();
        DefaultMQPushConsumer c = pushConsumer("retry");
        c.setMaxReconsumeTimes(1);
        c.subscribe(t, "*");
        c.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            for (MessageExt x : msgs) {
                deliveries.add(describe(x));
                twice.countDown();
            }
            return ConsumeConcurrentlyStatus.RECONSUME_LATER;
        });
        c.start();
        await(twice, "the first delivery and its retry");
        for (Map<String, Object> d : deliveries) {
            emit("retry", "delivered", d);
        }
        String dlq = "%DLQ%" + group("retry");
        DefaultLitePullConsumer reader = litePullConsumer("dlqreader");
        reader.start();
        Collection<MessageQueue> queues = List.of();
        long deadline = System.currentTimeMillis() + 30_000;
        while (queues.isEmpty() && System.currentTimeMillis() < deadline) {
            try {
                queues = reader.fetchMessageQueues(dlq);
            } catch (Exception e) {
                queues = List.of();
            }
            if (queues.isEmpty()) {
                Thread.sleep(500);  // the DLQ topic appears once the retry is sent back: polled for, bounded
            }
        }
        emit("retry", "dlqQueues", Map.of("count", queues.size()));
        if (!queues.isEmpty()) {
            reader.assign(queues);
            List<Map<String, Object>> dead = new ArrayList<>();
            deadline = System.currentTimeMillis() + WAIT_S * 1000;
            while (dead.isEmpty() && System.currentTimeMillis() < deadline) {
                for (MessageExt x : reader.poll()) {
                    dead.add(describe(x));
                }
            }
            for (Map<String, Object> d : dead) {
                emit("retry", "dlq", d);
            }
        }
        reader.shutdown();
        c.shutdown();
    }

    /** Input the client or the broker refuses: the code and remark the user gets. */
    static void bad() throws Exception {
        String t = topic("bad");
        DefaultMQProducer p = producer("bad");
        p.setMaxMessageSize(8 << 20);  // past the client's own check, so that the broker's answers
        Map<String, Message> cases = new TreeMap<>();
        cases.put("topicTooLong", msg("T".repeat(128), "TagA", "k", "x"));
        cases.put("topicIllegalChars", msg("bad topic!", "TagA", "k", "x"));
        cases.put("bodyJustOver4MiB", new Message(t, "TagA", "k", incompressible((4 << 20) + 1024)));
        cases.put("bodyTooLarge", new Message(t, "TagA", "k", incompressible(6 << 20)));
        Message props = msg(t, "TagA", "k", "x");
        props.putUserProperty("big", "v".repeat(40000));
        cases.put("propertiesTooLong", props);
        cases.put("emptyBody", new Message(t, "TagA", "k", new byte[0]));
        for (Map.Entry<String, Message> e : cases.entrySet()) {
            try {
                SendResult r = p.send(e.getValue());
                emit("bad", e.getKey(), Map.of("result", result(r)));
            } catch (Exception ex) {
                emit("bad", e.getKey(), Map.of("failure", failure(ex)));
            }
        }
        p.shutdown();
    }

    /** Signed with AclClientRPCHook (j4.accessKey / j4.secretKey): a send, a send to a topic the account may
     * not publish to (J4Denied), and a lite pull of what was sent. */
    static void acl() throws Exception {
        String t = topic("acl");
        DefaultMQProducer p = producer("acl");
        for (String target : List.of(t, "J4Denied")) {
            String event = target.equals(t) ? "send" : "sendDenied";
            try {
                emit("acl", event, Map.of("result", result(p.send(msg(target, "TagA", "k", "acl")))));
            } catch (Exception e) {
                emit("acl", event, Map.of("failure", failure(e)));
            }
        }
        p.shutdown();
        DefaultLitePullConsumer c = litePullConsumer("acl");
        c.subscribe(t, "*");
        c.start();
        int got = 0;
        long deadline = System.currentTimeMillis() + 15_000;
        while (got == 0 && System.currentTimeMillis() < deadline) {
            got += c.poll().size();
        }
        emit("acl", "consumed", Map.of("count", got));
        c.shutdown();
    }

    /** A push consumer that has consumed 5 messages, while an operator resets its group's offsets to the
     * start (mqadmin resetOffsetByTime, run by the test once "ready" is printed): the 5 come again, and a
     * message sent afterwards still arrives (the consumer is not stuck). */
    static void reset() throws Exception {
        String t = topic("reset");
        sendN("reset", t, 5);
        CountDownLatch first = new CountDownLatch(5);
        CountDownLatch again = new CountDownLatch(10);
        CountDownLatch after = new CountDownLatch(1);
        List<String> bodies = new CopyOnWriteArrayList<>();
        DefaultMQPushConsumer c = pushConsumer("reset");
        c.subscribe(t, "*");
        c.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            for (MessageExt x : msgs) {
                String body = new String(x.getBody(), UTF_8);
                bodies.add(body);
                if (body.equals("after")) {
                    after.countDown();
                } else {
                    first.countDown();
                    again.countDown();
                }
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        c.start();
        await(first, "the first 5 deliveries");
        emit("reset", "ready", Map.of("topic", t, "group", group("reset")));
        boolean redelivered = again.await(WAIT_S, TimeUnit.SECONDS);
        emit("reset", "redelivered", Map.of("complete", redelivered, "bodies", new ArrayList<>(bodies)));
        DefaultMQProducer p = producer("reset");
        p.send(msg(t, "TagA", "after", "after"));
        p.shutdown();
        emit("reset", "after", Map.of("arrived", after.await(WAIT_S, TimeUnit.SECONDS)));
        c.shutdown();
    }

    /** Random bytes: the client compresses a body over 4 KiB, and zeros would shrink to nothing. */
    static byte[] incompressible(int n) {
        byte[] b = new byte[n];
        new java.util.Random(n).nextBytes(b);
        return b;
    }

    /** A send to a topic nobody created, on a broker with autoCreateTopicEnable=false. */
    static void noroute() throws Exception {
        DefaultMQProducer p = producer("noroute");
        try {
            SendResult r = p.send(msg(topic("noroute"), "TagA", "k", "x"));
            emit("noroute", "send", Map.of("result", result(r)));
        } catch (Exception ex) {
            emit("noroute", "send", Map.of("failure", failure(ex)));
        }
        p.shutdown();
    }
}

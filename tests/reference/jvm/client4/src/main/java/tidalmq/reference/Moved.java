package tidalmq.reference;

import static java.nio.charset.StandardCharsets.UTF_8;
import static tidalmq.reference.Client4.emit;
import static tidalmq.reference.Client4.failure;
import static tidalmq.reference.Client4.producer;
import static tidalmq.reference.Client4.pushConsumer;
import static tidalmq.reference.Client4.result;
import static tidalmq.reference.Client4.topic;

import java.io.File;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;

/**
 * A NameServer moved under a running producer and push consumer that found it through the address server
 * (-Drocketmq.namesrv.domain, no namesrvAddr): sends to topic(moved) every 200 ms and consumes them, all
 * the while; once the file named by -Dj4.movedFlag exists, also sends to the topic the file names (created
 * after the move, so only the new NameServer has its route) until one is acknowledged. Every event carries
 * the time it happened ("at", ms).
 */
final class Moved {
    static final long RUN_MS = 160_000;  // within Client4's 170 s a scenario

    private Moved() {
    }

    static Map<String, Object> at(Map<String, Object> fields) {
        fields.put("at", System.currentTimeMillis());
        return fields;
    }

    static void run() throws Exception {
        String t = topic("moved");
        Set<String> received = ConcurrentHashMap.newKeySet();
        DefaultMQPushConsumer c = pushConsumer("moved");
        c.subscribe(t, "*");
        c.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            for (MessageExt x : msgs) {
                String body = new String(x.getBody(), UTF_8);
                if (received.add(body)) {
                    emit("moved", "received", at(new java.util.LinkedHashMap<>(Map.of("body", body))));
                }
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        c.start();
        DefaultMQProducer p = producer("moved");
        File flag = new File(System.getProperty("j4.movedFlag"));
        long deadline = System.currentTimeMillis() + RUN_MS;
        Set<String> sent = ConcurrentHashMap.newKeySet();
        boolean afterSent = false;
        for (int i = 0; System.currentTimeMillis() < deadline && !afterSent; i++) {
            String body = "m" + i;
            try {
                SendResult r = p.send(new Message(t, body.getBytes(UTF_8)));
                sent.add(body);
                Map<String, Object> fields = result(r);
                fields.put("body", body);
                emit("moved", "sent", at(fields));
            } catch (Exception e) {
                emit("moved", "sendFailed", at(failure(e)));
            }
            if (flag.exists()) {
                String after = new String(java.nio.file.Files.readAllBytes(flag.toPath()), UTF_8).trim();
                try {
                    emit("moved", "afterSent", at(result(p.send(new Message(after, "after".getBytes(UTF_8))))));
                    afterSent = true;
                } catch (Exception e) {
                    // the old list still: the new topic has no route there
                }
            }
            Thread.sleep(200);  // the pace of the sends, not a wait for anything
        }
        long drain = System.currentTimeMillis() + 30_000;
        while (!received.containsAll(sent) && System.currentTimeMillis() < drain) {
            Thread.sleep(50);
        }
        Map<String, Object> summary = new java.util.LinkedHashMap<>();
        summary.put("sent", sent.size());
        summary.put("receivedOfSent", sent.stream().filter(received::contains).count());
        summary.put("afterSent", afterSent);
        summary.put("namesrv", String.valueOf(
            p.getDefaultMQProducerImpl().getmQClientFactory().getMQClientAPIImpl().getNameServerAddressList()));
        emit("moved", "summary", at(summary));
        p.shutdown();
        c.shutdown();
    }
}

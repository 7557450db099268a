package tidalmq.ref;

import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.spring.annotation.RocketMQMessageListener;
import org.apache.rocketmq.spring.core.RocketMQListener;
import org.apache.rocketmq.spring.core.RocketMQTemplate;
import org.apache.rocketmq.spring.support.RocketMQHeaders;
import org.springframework.beans.factory.annotation.Value;
import org.springframework.boot.CommandLineRunner;
import org.springframework.boot.SpringApplication;
import org.springframework.boot.autoconfigure.SpringBootApplication;
import org.springframework.messaging.support.MessageBuilder;
import org.springframework.stereotype.Component;

/**
 * A Spring Boot application as its users write one: RocketMQTemplate.syncSend of one message (tag TagS,
 * key sk1) and a @RocketMQMessageListener of the same topic receiving it. Run with
 * --rocketmq.name-server=ADDR --rocketmq.producer.group=G --ref.topic=T --ref.group=G2; prints a "sent" and
 * a "received" JSON line, then exits.
 */
@SpringBootApplication
public class SpringApp implements CommandLineRunner {
    static final CountDownLatch RECEIVED = new CountDownLatch(1);

    private final RocketMQTemplate template;
    private final String topic;

    public SpringApp(RocketMQTemplate template, @Value("${ref.topic}") String topic) {
        this.template = template;
        this.topic = topic;
    }

    public static void main(String[] args) {
        System.exit(SpringApplication.exit(SpringApplication.run(SpringApp.class, args)));
    }

    @Override
    public void run(String... args) throws Exception {
        SendResult r = template.syncSend(topic + ":TagS",
            MessageBuilder.withPayload("spring hello").setHeader(RocketMQHeaders.KEYS, "sk1").build());
        System.out.println("{\"event\":\"sent\",\"status\":\"" + r.getSendStatus() + "\",\"id\":\"" + r.getMsgId()
            + "\"}");
        System.out.flush();
        if (!RECEIVED.await(60, TimeUnit.SECONDS)) {
            System.out.println("{\"event\":\"timeout\"}");
        }
    }

    /** The listener: the fields of what it got, as one JSON line (the values here need no escaping). */
    @Component
    @RocketMQMessageListener(topic = "${ref.topic}", consumerGroup = "${ref.group}", selectorExpression = "TagS")
    public static class Listener implements RocketMQListener<MessageExt> {
        @Override
        public void onMessage(MessageExt m) {
            if (RECEIVED.getCount() == 0) {
                return;
            }
            System.out.println("{\"event\":\"received\",\"id\":\"" + m.getMsgId() + "\",\"topic\":\"" + m.getTopic()
                + "\",\"tags\":\"" + m.getTags() + "\",\"keys\":\"" + m.getKeys() + "\",\"body\":\""
                + new String(m.getBody(), java.nio.charset.StandardCharsets.UTF_8) + "\",\"reconsumeTimes\":"
                + m.getReconsumeTimes() + "}");
            System.out.flush();
            RECEIVED.countDown();
        }
    }
}

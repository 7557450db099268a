package tidalmq.reference;

import com.alibaba.fastjson.JSON;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import org.apache.rocketmq.acl.common.AclClientRPCHook;
import org.apache.rocketmq.acl.common.SessionCredentials;
import org.apache.rocketmq.client.consumer.DefaultLitePullConsumer;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.exception.MQBrokerException;
import org.apache.rocketmq.client.exception.MQClientException;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.remoting.RPCHook;

/**
 * Runs the named scenarios of the 4.x Java client against one NameServer, side by side, and prints what a
 * user observes as JSON lines: {"scenario": ..., "event": ..., ...}. Usage:
 * Client4 NAMESRV RUN_ID SCENARIO... (RUN_ID keeps each run's topics and groups apart). NAMESRV "-": no
 * namesrvAddr is set, the clients find the NameServers as RocketMQ's do without one (rocketmq.namesrv.addr,
 * NAMESRV_ADDR, else the address server of rocketmq.namesrv.domain / .subgroup).
 * The ACL credentials, when set, come from the properties j4.accessKey / j4.secretKey.
 */
public final class Client4 {
    static String namesrv;  // null: none set (the address server's)
    static String runId;

    private Client4() {
    }

    public static void main(String[] args) throws Exception {
        namesrv = "-".equals(args[0]) ? null : args[0];
        runId = args[1];
        List<String> names = Arrays.asList(args).subList(2, args.length);
        ExecutorService pool = Executors.newFixedThreadPool(Math.max(1, names.size()));
        Map<String, Future<?>> running = new LinkedHashMap<>();
        for (String name : names) {
            running.put(name, pool.submit(() -> {
                try {
                    Scenarios.run(name);
                } catch (Throwable e) {
                    emit(name, "error", Map.of("error", String.valueOf(e)));
                }
                return null;
            }));
        }
        for (Map.Entry<String, Future<?>> f : running.entrySet()) {
            f.getValue().get(170, TimeUnit.SECONDS);
            emit(f.getKey(), "done", Map.of());
        }
        pool.shutdownNow();
        System.exit(0);  // the clients' own threads would keep the JVM alive
    }

    static String topic(String scenario) {
        return "J4" + scenario + "_" + runId;
    }

    static String group(String name) {
        return "J4G" + name + "_" + runId;
    }

    static RPCHook aclHook() {
        String ak = System.getProperty("j4.accessKey");
        if (ak == null || ak.isEmpty()) {
            return null;
        }
        return new AclClientRPCHook(new SessionCredentials(ak, System.getProperty("j4.secretKey", "")));
    }

    static DefaultMQProducer producer(String name) throws MQClientException {
        DefaultMQProducer p = new DefaultMQProducer(group(name), aclHook(), false, null);
        if (namesrv != null) {
            p.setNamesrvAddr(namesrv);
        }
        p.setInstanceName("p-" + name);
        p.setSendMsgTimeout(10000);
        p.start();
        return p;
    }

    static DefaultMQPushConsumer pushConsumer(String name) {
        DefaultMQPushConsumer c = new DefaultMQPushConsumer(group(name), aclHook(),
            new org.apache.rocketmq.client.consumer.rebalance.AllocateMessageQueueAveragely());
        if (namesrv != null) {
            c.setNamesrvAddr(namesrv);
        }
        c.setInstanceName("c-" + name);
        c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        return c;
    }

    static DefaultLitePullConsumer litePullConsumer(String name) {
        DefaultLitePullConsumer c = new DefaultLitePullConsumer(group(name), aclHook());
        if (namesrv != null) {
            c.setNamesrvAddr(namesrv);
        }
        c.setInstanceName("l-" + name);
        c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        c.setPollTimeoutMillis(1000);
        return c;
    }

    static synchronized void emit(String scenario, String event, Map<String, ?> fields) {
        Map<String, Object> line = new LinkedHashMap<>();
        line.put("scenario", scenario);
        line.put("event", event);
        line.putAll(fields);
        System.out.println(JSON.toJSONString(line));
        System.out.flush();
    }

    static Map<String, Object> result(SendResult r) {
        Map<String, Object> m = new LinkedHashMap<>();
        m.put("status", r.getSendStatus().name());
        m.put("msgId", r.getMsgId());
        m.put("offsetMsgId", r.getOffsetMsgId());
        m.put("topic", r.getMessageQueue().getTopic());
        m.put("brokerName", r.getMessageQueue().getBrokerName());
        m.put("queueId", r.getMessageQueue().getQueueId());
        m.put("queueOffset", r.getQueueOffset());
        m.put("regionId", r.getRegionId());
        m.put("transactionId", r.getTransactionId());
        return m;
    }

    static Map<String, Object> describe(MessageExt x) {
        Map<String, Object> m = new LinkedHashMap<>();
        m.put("topic", x.getTopic());
        m.put("tags", x.getTags());
        m.put("keys", x.getKeys());
        m.put("body", new String(x.getBody(), java.nio.charset.StandardCharsets.UTF_8));
        m.put("msgId", x.getMsgId());
        m.put("offsetMsgId", x instanceof org.apache.rocketmq.common.message.MessageClientExt
            ? ((org.apache.rocketmq.common.message.MessageClientExt) x).getOffsetMsgId() : x.getMsgId());
        m.put("queueId", x.getQueueId());
        m.put("queueOffset", x.getQueueOffset());
        m.put("commitLogOffset", x.getCommitLogOffset());
        m.put("bornHost", String.valueOf(x.getBornHost()));
        m.put("storeHost", String.valueOf(x.getStoreHost()));
        m.put("bornTimestamp", x.getBornTimestamp());
        m.put("storeTimestamp", x.getStoreTimestamp());
        m.put("reconsumeTimes", x.getReconsumeTimes());
        m.put("sysFlag", x.getSysFlag());
        m.put("delayTimeLevel", x.getDelayTimeLevel());
        m.put("properties", new LinkedHashMap<>(x.getProperties()));
        m.put("receivedAt", System.currentTimeMillis());
        return m;
    }

    static Map<String, Object> failure(Throwable e) {
        Map<String, Object> m = new LinkedHashMap<>();
        m.put("exception", e.getClass().getSimpleName());
        if (e instanceof MQBrokerException) {
            m.put("responseCode", ((MQBrokerException) e).getResponseCode());
            m.put("remark", ((MQBrokerException) e).getErrorMessage());
        } else if (e instanceof MQClientException) {
            m.put("responseCode", ((MQClientException) e).getResponseCode());
            m.put("remark", ((MQClientException) e).getErrorMessage());
        } else {
            m.put("remark", e.getMessage());
        }
        if (e.getCause() != null && e.getCause() != e) {
            m.put("cause", failure(e.getCause()));
        }
        return m;
    }

    static List<Map<String, Object>> describeAll(List<MessageExt> msgs) {
        List<Map<String, Object>> out = new ArrayList<>();
        for (MessageExt m : msgs) {
            out.add(describe(m));
        }
        return out;
    }
}

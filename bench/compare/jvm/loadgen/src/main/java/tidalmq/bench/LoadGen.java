package tidalmq.bench;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.time.Instant;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.Semaphore;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;
import java.util.concurrent.locks.LockSupport;

import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.exception.MQBrokerException;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendCallback;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;

/**
 * One phase of bench/compare's W1 or W2 through RocketMQ's official remoting client, against whichever broker
 * the NameServer names (TidalMQ or Apache RocketMQ). Arguments are key=value pairs:
 *
 * <pre>
 *   namesrv=HOST:PORT topic=T phase=throughput|paced|timer-enqueue|timer-late
 *   n=MESSAGES size=BODY_BYTES window=IN_FLIGHT batch=MESSAGES_A_REQUEST (0: single sends)
 *   rate=MSGS_PER_S seconds=S (paced, timer-late) lead_ms=MS (timer-late: the window starts this far ahead)
 *   wait_s=S (how long the consumer may take after the last send) pull_batch=N
 * </pre>
 *
 * Protocol on stdout (JSON lines) and stdin: {"event":"ready"} once the producer (and the consumer, subscribed,
 * with its queues assigned) are up; then it waits for a line on stdin (the harness samples the broker's CPU
 * first), sends, prints {"event":"sent",...} at the last acknowledgement, and {"event":"done",...} when the
 * consumer has every message or wait_s has passed. Bodies are "id|epoch ms|" padded to size: the send time (W1)
 * or the deliver time (W2), read back by the consumer in the same JVM, on the same clock.
 */
public final class LoadGen {
    private final Map<String, String> args;
    private final String phase;
    private final int n;
    private final int size;

    private LoadGen(Map<String, String> args) {
        this.args = args;
        this.phase = args.getOrDefault("phase", "throughput");
        this.n = intArg("n", 10000);
        this.size = intArg("size", 1024);
    }

    private int intArg(String k, int dflt) {
        return args.containsKey(k) ? Integer.parseInt(args.get(k)) : dflt;
    }

    private double dblArg(String k, double dflt) {
        return args.containsKey(k) ? Double.parseDouble(args.get(k)) : dflt;
    }

    static double nowMs() {
        Instant t = Instant.now();
        return t.getEpochSecond() * 1000.0 + t.getNano() / 1e6;
    }

    private byte[] body(long id, double stamp) {
        byte[] head = (id + "|" + String.format("%.3f", stamp) + "|").getBytes(StandardCharsets.US_ASCII);
        byte[] b = new byte[Math.max(size, head.length)];
        Arrays.fill(b, (byte) 'x');
        System.arraycopy(head, 0, b, 0, head.length);
        return b;
    }

    /** What the consumer saw: the first arrival of each id, its lateness (receive - stamp), and duplicates. */
    static final class Recorder {
        private final boolean[] seen;
        private final double[] late;
        private int count;
        private int duplicates;
        private double last;
        final CountDownLatch all;

        Recorder(int expected) {
            seen = new boolean[expected];
            late = new double[expected];
            all = new CountDownLatch(expected);
        }

        synchronized void on(byte[] b, double recv) {
            String s = new String(b, 0, Math.min(b.length, 64), StandardCharsets.US_ASCII);
            int p1 = s.indexOf('|');
            int p2 = s.indexOf('|', p1 + 1);
            int id = Integer.parseInt(s.substring(0, p1));
            double stamp = Double.parseDouble(s.substring(p1 + 1, p2));
            if (id < 0 || id >= seen.length) {
                return;
            }
            if (seen[id]) {
                duplicates++;
                return;
            }
            seen[id] = true;
            late[count++] = recv - stamp;
            last = recv;
            all.countDown();
        }

        synchronized String json() {
            double[] l = Arrays.copyOf(late, count);
            Arrays.sort(l);
            return "\"received\":" + count + ",\"duplicates\":" + duplicates + ",\"last_recv_ms\":" + last
                + ",\"p50_ms\":" + pct(l, 50) + ",\"p99_ms\":" + pct(l, 99)
                + ",\"max_ms\":" + (l.length > 0 ? l[l.length - 1] : "NaN") + ",\"early\":" + early(l);
        }

        private static String pct(double[] sorted, double q) {
            if (sorted.length == 0) {
                return "NaN";
            }
            int i = (int) Math.ceil(q / 100.0 * sorted.length) - 1;
            return Double.toString(sorted[Math.max(0, Math.min(sorted.length - 1, i))]);
        }

        private static int early(double[] sorted) {
            int k = 0;
            while (k < sorted.length && sorted[k] < 0) {
                k++;
            }
            return k;
        }
    }

    private DefaultMQPushConsumer consumer(String namesrv, String topic, Recorder rec) throws Exception {
        DefaultMQPushConsumer c = new DefaultMQPushConsumer(args.getOrDefault("group", "loadgen_cg_" + topic));
        c.setNamesrvAddr(namesrv);
        c.setInstanceName("loadgen-consumer");
        c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        c.setPullBatchSize(intArg("pull_batch", 256));
        c.setConsumeMessageBatchMaxSize(32);
        c.subscribe(topic, "*");
        c.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            double t = nowMs();
            for (MessageExt m : msgs) {
                rec.on(m.getBody(), t);
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        c.start();
        // subscribed once the rebalance has given it queues (else the first sends would wait for it)
        long deadline = System.currentTimeMillis() + 60_000;
        while (c.getDefaultMQPushConsumerImpl().getRebalanceImpl().getProcessQueueTable().isEmpty()) {
            if (System.currentTimeMillis() > deadline) {
                throw new IllegalStateException("the consumer was given no queue of " + topic + " in 60 s");
            }
            Thread.sleep(20);
        }
        return c;
    }

    private void run() throws Exception {
        String namesrv = args.get("namesrv");
        String topic = args.get("topic");
        boolean consume = !phase.equals("timer-enqueue");
        int expected = phase.equals("paced") || phase.equals("timer-late")
            ? (int) Math.round(dblArg("rate", 1000) * dblArg("seconds", 5)) : n;
        DefaultMQProducer producer = new DefaultMQProducer(args.getOrDefault("pgroup", "loadgen_pg"));
        producer.setNamesrvAddr(namesrv);
        producer.setInstanceName("loadgen-producer");
        producer.setSendMsgTimeout(intArg("send_timeout_ms", 10_000));
        producer.start();
        // no consumer, no recorder: its arrays are sized by the count (10^8 of them would not fit the heap)
        Recorder rec = consume ? new Recorder(expected) : null;
        DefaultMQPushConsumer c = consume ? consumer(namesrv, topic, rec) : null;
        // the route is in the producer's cache before the clock starts
        producer.send(new Message(topic, body(-1, nowMs())));
        // the JIT warmed up on the phase's own path (ids below 0: the consumer counts none of them)
        int warmup = intArg("warmup", 0);
        if (warmup > 0) {
            send(producer, topic, warmup, -warmup - 1);
            firstError = "";  // a warm-up send's error is not the phase's
            busyRetries.set(0);
        }
        System.out.println("{\"event\":\"ready\"}");
        System.out.flush();
        new BufferedReader(new InputStreamReader(System.in, StandardCharsets.US_ASCII)).readLine();
        double t0 = nowMs();
        long[] sent = send(producer, topic, expected, 0);
        double t1 = nowMs();
        System.out.println("{\"event\":\"sent\",\"count\":" + sent[0] + ",\"errors\":" + sent[1]
            + ",\"first_error\":\"" + jsonText(firstError) + "\""
            + ",\"busy_retries\":" + busyRetries.get()
            + ",\"send_s\":" + (t1 - t0) / 1000 + ",\"t0_ms\":" + t0 + "}");
        System.out.flush();
        String got = "";
        if (c != null) {
            rec.all.await((long) (dblArg("wait_s", 60) * 1000), TimeUnit.MILLISECONDS);
            got = "," + rec.json();
            c.shutdown();
        }
        producer.shutdown();
        System.out.println("{\"event\":\"done\",\"expected\":" + expected + got + "}");
        System.out.flush();
    }

    /** The first send error of the measured sends, as text ("" when none failed). */
    private String firstError = "";

    private static String jsonText(Object o) {
        return String.valueOf(o).replace("\\", "\\\\").replace("\"", "'").replace("\n", " ");
    }

    /** The phase's sends, ids from {@code idBase}; [acknowledged, failed]. */
    private long[] send(DefaultMQProducer producer, String topic, int count, int idBase) throws Exception {
        int window = intArg("window", 256);
        int batch = intArg("batch", 0);
        Semaphore inFlight = new Semaphore(window);
        AtomicLong ok = new AtomicLong();
        AtomicLong failed = new AtomicLong();
        AtomicReference<Throwable> firstError = new AtomicReference<>();
        Sender cb = new Sender(producer, inFlight, ok, failed, firstError);
        // batch > 0: batches of that many, timer messages too, each with its own deliver time (TidalMQ takes
        // them; RocketMQ refuses delays in batches, so its timer phases run with batch=0)
        Batcher out = new Batcher(cb, inFlight, batch);
        Random rnd = new Random();
        switch (phase) {
            case "throughput" -> {
                for (int i = 0; i < count; i++) {
                    out.add(new Message(topic, body(idBase + i, nowMs())));
                }
                out.flush();
            }
            case "paced" -> {
                double rate = dblArg("rate", 1000);
                long start = System.nanoTime();
                for (int i = 0; i < count; i++) {
                    long target = start + (long) (i * 1e9 / rate);
                    long d = target - System.nanoTime();
                    if (d > 0) {
                        LockSupport.parkNanos(d);
                    }
                    inFlight.acquire();
                    cb.send(new Message(topic, body(idBase + i, nowMs())));
                }
            }
            case "timer-enqueue" -> {
                // due min_delay_ms .. max_delay_ms ahead (1 min .. 1 h: nothing falls due while the phase runs);
                // a line at each tenth of the count (the rate over time), the sends cut at budget_s
                long base = (long) nowMs();
                long lo = (long) dblArg("min_delay_ms", 60_000);
                long span = (long) dblArg("max_delay_ms", 3_600_000) - lo;
                long cut = System.nanoTime() + (long) (dblArg("budget_s", 1e9) * 1e9);
                int tenth = Math.max(1, count / 10);
                for (int i = 0; i < count; i++) {
                    if (i > 0 && i % tenth == 0 && idBase >= 0) {
                        out.flush();
                        System.out.println("{\"event\":\"tenth\",\"sent\":" + i + ",\"at_ms\":" + nowMs() + "}");
                        System.out.flush();
                        if (System.nanoTime() > cut) {
                            break;
                        }
                    }
                    long due = base + lo + (long) (rnd.nextDouble() * span);
                    Message m = new Message(topic, body(idBase + i, due));
                    m.setDeliverTimeMs(due);
                    out.add(m);
                }
                out.flush();
            }
            case "timer-late" -> {
                // due uniformly over [T0, T0 + seconds] at rate due/s, T0 lead_ms ahead, sent in random order
                double rate = dblArg("rate", 1000);
                long t0 = (long) nowMs() + (long) dblArg("lead_ms", 5000);
                long[] due = new long[count];
                for (int i = 0; i < count; i++) {
                    due[i] = t0 + (long) (i * 1000.0 / rate);
                }
                for (int i = count - 1; i > 0; i--) {
                    int j = rnd.nextInt(i + 1);
                    long t = due[i];
                    due[i] = due[j];
                    due[j] = t;
                }
                for (int i = 0; i < count; i++) {
                    Message m = new Message(topic, body(idBase + i, due[i]));
                    m.setDeliverTimeMs(due[i]);
                    out.add(m);
                }
                out.flush();
            }
            default -> throw new IllegalArgumentException("unknown phase " + phase);
        }
        inFlight.acquire(window);
        if (firstError.get() != null && this.firstError.isEmpty()) {
            this.firstError = String.valueOf(firstError.get());
        }
        return new long[] {ok.get(), failed.get()};
    }

    /** Busy answers resent (RocketMQ's flow control: SYSTEM_BUSY, "[TIMEOUT_CLEAN_QUEUE]broker busy"). */
    private final AtomicLong busyRetries = new AtomicLong();
    private static final ScheduledExecutorService RETRY = Executors.newSingleThreadScheduledExecutor(r -> {
        Thread t = new Thread(r, "busy-retry");
        t.setDaemon(true);
        return t;
    });
    private static final int SYSTEM_BUSY = 2;
    private static final int BUSY_ATTEMPTS = 50;

    /** Async sends that hold an in-flight permit until answered. A send the broker refuses as busy is sent
     * again after a pause (10 ms, growing to 200 ms), as a user's producer does under flow control: the
     * official client resends only on another broker, and a one-broker bench has none. Other errors fail. */
    private final class Sender {
        private final DefaultMQProducer producer;
        private final Semaphore inFlight;
        private final AtomicLong ok;
        private final AtomicLong failed;
        private final AtomicReference<Throwable> firstError;

        Sender(DefaultMQProducer producer, Semaphore inFlight, AtomicLong ok, AtomicLong failed,
               AtomicReference<Throwable> firstError) {
            this.producer = producer;
            this.inFlight = inFlight;
            this.ok = ok;
            this.failed = failed;
            this.firstError = firstError;
        }

        void send(Message m) throws Exception {
            send(m, 0);
        }

        void send(List<Message> batch) throws Exception {
            send(batch, 0);
        }

        private void send(Message m, int tries) throws Exception {
            producer.send(m, callback(1, () -> send(m, tries + 1), tries));
        }

        private void send(List<Message> batch, int tries) throws Exception {
            producer.send(batch, callback(batch.size(), () -> send(batch, tries + 1), tries));
        }

        private SendCallback callback(int messages, Action again, int tries) {
            return new SendCallback() {
                @Override
                public void onSuccess(SendResult r) {
                    ok.addAndGet(messages);
                    inFlight.release();
                }

                @Override
                public void onException(Throwable e) {
                    boolean busy = e instanceof MQBrokerException be && be.getResponseCode() == SYSTEM_BUSY;
                    if (busy && tries < BUSY_ATTEMPTS) {
                        busyRetries.incrementAndGet();
                        RETRY.schedule(() -> {
                            try {
                                again.run();
                            } catch (Exception resendFailed) {
                                onException(resendFailed);
                            }
                        }, Math.min(200, 10L << Math.min(tries, 4)), TimeUnit.MILLISECONDS);
                        return;
                    }
                    failed.addAndGet(messages);
                    firstError.compareAndSet(null, e);
                    inFlight.release();
                }
            };
        }
    }

    /** Sends each message at once (batch 0) or holds it until a batch is full; flush sends what is held. */
    private static final class Batcher {
        private final Sender cb;
        private final Semaphore inFlight;
        private final int batch;
        private List<Message> held = new ArrayList<>();

        Batcher(Sender cb, Semaphore inFlight, int batch) {
            this.cb = cb;
            this.inFlight = inFlight;
            this.batch = batch;
        }

        void add(Message m) throws Exception {
            if (batch <= 0) {
                inFlight.acquire();
                cb.send(m);
                return;
            }
            held.add(m);
            if (held.size() >= batch) {
                flush();
            }
        }

        void flush() throws Exception {
            if (held.isEmpty()) {
                return;
            }
            inFlight.acquire();
            cb.send(held);
            held = new ArrayList<>();
        }
    }

    @FunctionalInterface
    private interface Action {
        void run() throws Exception;
    }

    public static void main(String[] argv) throws Exception {
        Map<String, String> a = new HashMap<>();
        for (String s : argv) {
            int eq = s.indexOf('=');
            if (eq <= 0) {
                throw new IllegalArgumentException("expected key=value, got " + s);
            }
            a.put(s.substring(0, eq), s.substring(eq + 1));
        }
        try {
            new LoadGen(a).run();
        } catch (Throwable e) {
            System.out.println("{\"event\":\"error\",\"error\":\"" + jsonText(e) + "\"}");
            System.out.flush();
            System.exit(2);
        }
        System.exit(0);
    }
}
